// Checks the tags the hand-written codecs use (hand-tags.js) against the descriptors buf
// compiled from proto/ (generated/descriptors.binpb). scripts/generate.mjs runs it on every
// `npm run build` and fails the build on any difference; a test runs it too.
import descriptor from 'protobufjs/ext/descriptor/index.js';

const TYPE_DOUBLE = 1;
const TYPE_FLOAT = 2;
const TYPE_FIXED64 = 6;
const TYPE_FIXED32 = 7;
const TYPE_GROUP = 10;
const TYPE_STRING = 9;
const TYPE_MESSAGE = 11;
const TYPE_BYTES = 12;
const TYPE_SFIXED32 = 15;
const TYPE_SFIXED64 = 16;
const LABEL_REPEATED = 3;

const WIRE_VARINT = 0;
const WIRE_FIXED64 = 1;
const WIRE_LENGTH_DELIMITED = 2;
const WIRE_START_GROUP = 3;
const WIRE_FIXED32 = 5;

function scalarWireType(type) {
  if (type === TYPE_DOUBLE || type === TYPE_FIXED64 || type === TYPE_SFIXED64) return WIRE_FIXED64;
  if (type === TYPE_FLOAT || type === TYPE_FIXED32 || type === TYPE_SFIXED32) return WIRE_FIXED32;
  return WIRE_VARINT;
}

/** The wire type a proto3 writer uses for `field` (repeated numbers are packed unless said otherwise). */
function wireType(field) {
  const type = field.type;
  if (type === TYPE_STRING || type === TYPE_BYTES || type === TYPE_MESSAGE) return WIRE_LENGTH_DELIMITED;
  if (type === TYPE_GROUP) return WIRE_START_GROUP;
  if (field.label === LABEL_REPEATED && field.options?.packed !== false) return WIRE_LENGTH_DELIMITED;
  return scalarWireType(type);
}

/**
 * Every field of the `quorumq.v1` messages in an encoded FileDescriptorSet, as
 * "Message.field" (nested messages "Outer.Inner.field"; fields named as the generated
 * classes name them, camelCase) -> its tag, (number << 3) | wire type.
 */
export function descriptorTags(descriptorSet) {
  const set = descriptor.FileDescriptorSet.decode(descriptorSet);
  const tags = new Map();
  const visit = (prefix, message) => {
    const name = prefix === '' ? message.name : `${prefix}.${message.name}`;
    for (const field of message.field) tags.set(`${name}.${field.jsonName}`, (field.number << 3) | wireType(field));
    for (const nested of message.nestedType) visit(name, nested);
  };
  for (const file of set.file) if (file.package === 'quorumq.v1') for (const message of file.messageType) visit('', message);
  return tags;
}

const hex = (tag) => `0x${tag.toString(16).padStart(2, '0')}`;
const describe = (tag) => `${hex(tag)} (field ${tag >>> 3}, wire type ${tag & 7})`;

/**
 * What is wrong with `handTags` ({ Message: { field: tag } }) against the descriptors: a field
 * proto/ does not have, a tag that differs (a renumbered field, or one of another type), a tag
 * of more than one byte (the hand-written codecs write every tag as one byte, except in the
 * messages of `varintTagged`). Empty when all agree.
 */
export function tagProblems(handTags, descriptorSet, varintTagged = new Set()) {
  const tags = descriptorTags(descriptorSet);
  const problems = [];
  for (const [message, fields] of Object.entries(handTags)) {
    for (const [field, tag] of Object.entries(fields)) {
      const name = `${message}.${field}`;
      const expected = tags.get(name);
      if (expected === undefined) problems.push(`${name}: proto/ has no such field (hand tag ${describe(tag)})`);
      else if (expected !== tag) problems.push(`${name}: the hand-written codecs use ${describe(tag)}, proto/ says ${describe(expected)}`);
      else if (tag > 0x7f && !varintTagged.has(message)) problems.push(`${name}: tag ${describe(tag)} takes two bytes; the hand-written codecs write one`);
    }
  }
  return problems;
}
