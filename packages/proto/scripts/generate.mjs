// Generates the TypeScript-visible wire code from proto/quorumq/v1/*.proto:
//   generated/quorumq.js + .d.ts   static protobufjs classes (pbjs / pbts)
//   generated/services.js + .d.ts  grpc-js service definitions built from the services the
//                                  .proto files declare, (de)serialising with those classes
//   generated/index.js + .d.ts     re-exports both, runtime.js's Reader and Writer, fields.js,
//                                  publish.js and hand-tags.js
//   generated/descriptors.binpb    a FileDescriptorSet of proto/ and of grpc.health.v1, built by
//                                  buf (what the node serves through server reflection)
//   generated/hand-tags.d.ts       the types of ../hand-tags.js (each tag a literal type)
// and checks ../hand-tags.js, the tags of the hand-written codecs, against those descriptors:
// a renumbered (or retyped) field that a hand-written codec uses fails the build.
// The generated code runs on runtime.js (hand-written), not on the shared protobufjs's
// configuration: see there.
// Nothing here is written by hand per message type: add a message or an rpc to a .proto
// file and run `npm run build`.
import { execFileSync } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import protobuf from 'protobufjs';

import { handTags, varintTagged } from '../hand-tags.js';
import { tagProblems } from '../tag-check.js';

const here = dirname(fileURLToPath(import.meta.url));
const packageDir = resolve(here, '..');
const protoRoot = resolve(packageDir, '../../proto');
const out = join(packageDir, 'generated');
mkdirSync(out, { recursive: true });

const protoDir = join(protoRoot, 'quorumq/v1');
const files = readdirSync(protoDir).filter((f) => f.endsWith('.proto')).sort().map((f) => join(protoDir, f));
const packageRoot = (name) => dirname(fileURLToPath(import.meta.resolve(`${name}/package.json`)));
const cli = (name) => join(dirname(fileURLToPath(import.meta.resolve('protobufjs-cli/package.json'))), 'bin', name);

execFileSync(process.execPath, [cli('pbjs'), '-t', 'static-module', '-w', 'es6', '--es6', '--force-number',
  '--no-verify', '--no-delimited', '--no-beautify',
  '-p', protoRoot, '-o', join(out, 'quorumq.js'), ...files], { stdio: 'inherit' });
// The generated code must not change the protobufjs module it shares with the application
// (util.Long, Reader.prototype, roots): it runs on ../runtime.js instead, whose util has no
// Long and whose Reader reads 64-bit fields as numbers whatever protobufjs's configuration.
// A header's int_value is exact to 64 bits: a number when that is exact, else a bigint.
{
  const file = join(out, 'quorumq.js');
  let code = readFileSync(file, 'utf8');
  const replace = (from, to) => {
    if (!code.includes(from)) throw new Error(`generate: quorumq.js no longer contains ${JSON.stringify(from)}`);
    code = code.split(from).join(to);
  };
  replace('import $protobuf from', "import * as $runtime from '../runtime.js';\nimport $protobuf from");
  replace('const $Reader = $protobuf.Reader, $Writer = $protobuf.Writer, $util = $protobuf.util;',
    'const $Reader = $runtime.Reader, $Writer = $protobuf.Writer, $util = $runtime.util;');
  replace('const $root = $protobuf.roots["default"] || ($protobuf.roots["default"] = {});', 'const $root = {};');
  // HeaderValue.int_value (the only field of that name), its decoder, encoder and types.
  replace('m.intValue = r.int64();', 'm.intValue = r.int64Exact();');
  replace('.int64(m.intValue)', '.int64($runtime.long(m.intValue))');
  replace('@property {number|null} [intValue]', '@property {number|bigint|null} [intValue]');
  replace('@member {number|null|undefined} intValue', '@member {number|bigint|null|undefined} intValue');
  replace('intValue?: number|null;', 'intValue?: number|bigint|null;');
  replace('intValue: number;', 'intValue: number|bigint;');
  // Oneof setters that delete only the fields a message has (see runtime.js).
  replace('set: $util.oneOfSetter($oneOfFields)', 'set: $runtime.oneOfSetter($oneOfFields)');
  // Reads of the shared module (protobufjs's Writer, util.toJSONOptions) are fine; writes are not.
  const write = /\$protobuf\.[\w.]+(\[[^\]]*\])?\s*=(?!=)/.exec(code);
  if (write !== null) throw new Error(`generate: quorumq.js writes to the shared protobufjs: ${write[0]}`);
  writeFileSync(file, code);
}
execFileSync(process.execPath, [cli('pbts'), '--no-comments', '-o', join(out, 'quorumq.d.ts'), join(out, 'quorumq.js')], { stdio: 'inherit' });

// Services, from the same .proto files.
const root = new protobuf.Root();
root.resolvePath = (_origin, target) => (target.startsWith('/') ? target : join(protoRoot, target));
root.loadSync(files, { keepCase: false });
root.resolveAll();

const services = [];
(function collect(namespace) {
  for (const nested of namespace.nestedArray) {
    if (nested instanceof protobuf.Service) services.push(nested);
    else if (nested.nestedArray) collect(nested);
  }
})(root);

const lowerFirst = (s) => s.charAt(0).toLowerCase() + s.slice(1);
const typeRef = (type) => type.fullName.slice(1); // ".quorumq.v1.Foo" -> "quorumq.v1.Foo"
const interfaceRef = (type) => `${typeRef(type)}.$Properties`;

let js = `// Generated by scripts/generate.mjs from proto/quorumq/v1. Do not edit.\nimport { quorumq } from './quorumq.js';\n\n`;
// protobufjs's Node writer already returns a Buffer: hand it to grpc-js without a copy.
js += `const asBuffer = (u) => (Buffer.isBuffer(u) ? u : Buffer.from(u.buffer, u.byteOffset, u.byteLength));\n`;
js += `const serialize = (type) => (message) => asBuffer(type.encode(message).finish());\n`;
js += `const deserialize = (type) => (bytes) => type.decode(bytes);\n\n`;
let dts = `// Generated by scripts/generate.mjs from proto/quorumq/v1. Do not edit.\nimport type { MethodDefinition } from '@grpc/grpc-js';\nimport { quorumq } from './quorumq.js';\n\n`;
for (const service of services) {
  const path = typeRef(service);
  js += `/** ${path} */\nexport const ${service.name}Service = {\n`;
  dts += `/** ${path} */\nexport declare const ${service.name}Service: {\n`;
  for (const method of service.methodsArray) {
    method.resolve();
    const req = method.resolvedRequestType;
    const res = method.resolvedResponseType;
    js += `  ${lowerFirst(method.name)}: {\n    path: '/${path}/${method.name}',\n    requestStream: ${Boolean(method.requestStream)},\n    responseStream: ${Boolean(method.responseStream)},\n`;
    js += `    requestSerialize: serialize(${typeRef(req)}),\n    requestDeserialize: deserialize(${typeRef(req)}),\n`;
    js += `    responseSerialize: serialize(${typeRef(res)}),\n    responseDeserialize: deserialize(${typeRef(res)}),\n    originalName: '${method.name}',\n  },\n`;
    dts += `  readonly ${lowerFirst(method.name)}: MethodDefinition<${interfaceRef(req)}, ${typeRef(res)}> & { readonly requestStream: ${Boolean(method.requestStream)}; readonly responseStream: ${Boolean(method.responseStream)} };\n`;
  }
  js += `};\n\n`;
  dts += `};\n\n`;
}
writeFileSync(join(out, 'services.js'), js);
writeFileSync(join(out, 'services.d.ts'), dts);
// The hand-written Reader (64-bit fields as numbers) for the node's and the SDK's field-by-field
// readers of hot-path messages; fields.js (hand-written) writes them; publish.js holds the
// publish stream's codec both ends share; hand-tags.js every tag those use (checked below).
writeFileSync(
  join(out, 'index.js'),
  `export { quorumq } from './quorumq.js';\nexport * from './services.js';\nexport { Reader, Writer } from '../runtime.js';\nexport * from '../fields.js';\n` +
    `export { handTags, varintTagged } from '../hand-tags.js';\nexport * from '../publish.js';\n` +
    `/** The FileDescriptorSet (binary) of proto/ and grpc.health.v1, compiled by buf. */\n` +
    `export const descriptorSetPath = new URL('./descriptors.binpb', import.meta.url);\n`,
);
writeFileSync(
  join(out, 'index.d.ts'),
  `export { quorumq } from './quorumq.js';\nexport * from './services.js';\nexport { Reader, Writer } from '../runtime.js';\nexport * from '../fields.js';\n` +
    `export { handTags, varintTagged } from './hand-tags.js';\nexport * from '../publish.js';\n` +
    `/** The FileDescriptorSet (binary) of proto/ and grpc.health.v1, compiled by buf. */\n` +
    `export declare const descriptorSetPath: URL;\n`,
);

// Descriptors for server reflection, compiled by buf (a real protobuf compiler: protobufjs's
// descriptors are not well formed, e.g. its map entry types are misnamed, and buf curl or
// grpcurl then cannot use them). Both the quorumq files and the standard health service the
// node serves (grpc-health-check's health.proto) go in. A FileDescriptorSet is one repeated
// field, so two encoded sets written one after the other are one set holding both.
const buf = join(packageRoot('@bufbuild/buf'), 'bin', 'buf'); // a Node script that runs the platform's binary
const descriptorSet = (input) => execFileSync(process.execPath, [buf, 'build', input, '--output', '-#format=binpb']);
const descriptors = Buffer.concat([descriptorSet(protoRoot), descriptorSet(join(packageRoot('grpc-health-check'), 'proto'))]);
writeFileSync(join(out, 'descriptors.binpb'), descriptors);

// The hand-written codecs' tags against what buf compiled: any difference fails the build.
const problems = tagProblems(handTags, descriptors, varintTagged);
if (problems.length > 0) {
  throw new Error(
    `generate: hand-tags.js disagrees with proto/ (a renumbered or retyped field breaks stored logs and older peers; ` +
      `if the change is meant, update hand-tags.js and the codecs that use the field):\n  ${problems.join('\n  ')}`,
  );
}
let tagTypes = `// Generated by scripts/generate.mjs from ../hand-tags.js. Do not edit.\n/** The hand-written codecs' tags, checked against proto/ at build time (see ../hand-tags.js). */\nexport declare const handTags: {\n`;
for (const [message, fields] of Object.entries(handTags)) {
  tagTypes += `  readonly ${JSON.stringify(message)}: { ${Object.entries(fields).map(([field, tag]) => `readonly ${field}: ${tag};`).join(' ')} };\n`;
}
writeFileSync(join(out, 'hand-tags.d.ts'), `${tagTypes}};\n/** The messages of handTags whose tags are written as varints (see ../hand-tags.js). */\nexport declare const varintTagged: ReadonlySet<string>;\n`);

console.log(`generated ${services.length} services from ${files.length} proto files`);
