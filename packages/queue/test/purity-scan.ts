/**
 * A purity check over TypeScript source, with the compiler's own parser and type checker
 * (not regexes: a comment or a string that mentions `Date.now()` is not a call of it, and a
 * local variable named `process` is not the global one).
 *
 * It reports, per file and line:
 * - the clock: `Date.now`, `Date()`, `new Date()` without an argument, `performance`;
 * - randomness: `Math.random`, `crypto`;
 * - timers: `setTimeout`, `setInterval`, `setImmediate` (and their `clear*`), `queueMicrotask`;
 * - the outside world: `process`, `console`, `fetch`, `globalThis`, `global`, `eval`;
 * - asynchrony: `async`, `await`, `Promise`;
 * - loading code: `require(...)`, `import(...)`, and any import or re-export that is not a
 *   relative path inside `root` (no `node:` modules, no other packages, type-only or not);
 * - unchecked casts: `as any`, `<any>`.
 * A name counts only when it resolves to the global one (declared by the standard library or
 * @types/node, or not declared at all), so shadowing it with a declaration of one's own is fine.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import ts from 'typescript';

export interface Violation {
  /** Relative to the scanned root. */
  readonly file: string;
  readonly line: number;
  readonly what: string;
}

const GLOBALS: ReadonlyMap<string, string> = new Map([
  ['performance', 'the clock (performance)'],
  ['crypto', 'randomness (crypto)'],
  ['setTimeout', 'timers (setTimeout)'],
  ['setInterval', 'timers (setInterval)'],
  ['setImmediate', 'timers (setImmediate)'],
  ['clearTimeout', 'timers (clearTimeout)'],
  ['clearInterval', 'timers (clearInterval)'],
  ['clearImmediate', 'timers (clearImmediate)'],
  ['queueMicrotask', 'timers (queueMicrotask)'],
  ['process', 'the process'],
  ['console', 'I/O (console)'],
  ['fetch', 'I/O (fetch)'],
  ['globalThis', 'the global object (globalThis)'],
  ['global', 'the global object (global)'],
  ['eval', 'eval'],
  ['require', 'loading code (require)'],
  ['Promise', 'asynchrony (Promise)'],
]);

/** The `.ts` files under `dir` (recursively), absolute paths in sorted order. */
export function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...sourceFiles(path));
    else if (entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts')) out.push(path);
  }
  return out.sort();
}

/**
 * Checks `files` (absolute paths under `root`; `contents` overrides what is on disk, for
 * tests of the check itself). Imports must stay inside `root`.
 */
export function scanPurity(root: string, files: readonly string[], contents: ReadonlyMap<string, string> = new Map()): Violation[] {
  const options: ts.CompilerOptions = {
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
    lib: ['lib.es2022.d.ts'],
    types: ['node'],
    typeRoots: [findTypeRoots(root)],
    strict: true,
    noEmit: true,
    skipLibCheck: true,
  };
  const host = ts.createCompilerHost(options, true);
  const read = (path: string): string | undefined => contents.get(path) ?? (existsSync(path) ? readFileSync(path, 'utf8') : undefined);
  const getSourceFile = host.getSourceFile.bind(host);
  host.getSourceFile = (path, language, onError) => {
    const text = contents.get(path);
    return text === undefined ? getSourceFile(path, language, onError) : ts.createSourceFile(path, text, language, true);
  };
  const fileExists = host.fileExists.bind(host);
  host.fileExists = (path) => contents.has(path) || fileExists(path);
  host.readFile = read;

  const program = ts.createProgram({ rootNames: [...files], options, host });
  const checker = program.getTypeChecker();
  const own = new Set(files.map((f) => resolve(f)));
  const violations: Violation[] = [];

  for (const file of files) {
    const source = program.getSourceFile(file);
    if (source === undefined) throw new Error(`cannot read ${file}`);
    const report = (node: ts.Node, what: string): void => {
      const line = source.getLineAndCharacterOfPosition(node.getStart(source)).line + 1;
      violations.push({ file: relative(root, file).split(sep).join('/'), line, what });
    };

    /** Whether `id` names a global (the standard library's, @types/node's, or undeclared). */
    const isGlobal = (id: ts.Identifier): boolean => {
      let symbol = ts.isShorthandPropertyAssignment(id.parent)
        ? checker.getShorthandAssignmentValueSymbol(id.parent)
        : checker.getSymbolAtLocation(id);
      if (symbol === undefined) return true;
      if (symbol.flags & ts.SymbolFlags.Alias) symbol = checker.getAliasedSymbol(symbol);
      const declarations = symbol.declarations ?? [];
      return declarations.length === 0 || declarations.every((d) => !own.has(resolve(d.getSourceFile().fileName)));
    };

    const checkSpecifier = (node: ts.Node, specifier: ts.Expression | undefined, typeOnly: boolean): void => {
      if (specifier === undefined) return;
      if (!ts.isStringLiteral(specifier)) {
        report(node, 'loading code (a computed module name)');
        return;
      }
      const name = specifier.text;
      const target = resolve(dirname(file), name);
      const inside = (name.startsWith('./') || name.startsWith('../')) && (target === root || target.startsWith(root + sep));
      if (!inside) report(node, `${typeOnly ? 'a type-only import' : 'an import'} of ${JSON.stringify(name)} (only the package's own relative files)`);
    };

    const visit = (node: ts.Node): void => {
      if (ts.isImportDeclaration(node)) {
        checkSpecifier(node, node.moduleSpecifier, node.importClause?.isTypeOnly ?? false);
      } else if (ts.isExportDeclaration(node)) {
        checkSpecifier(node, node.moduleSpecifier, node.isTypeOnly);
      } else if (ts.isImportEqualsDeclaration(node) && ts.isExternalModuleReference(node.moduleReference)) {
        checkSpecifier(node, node.moduleReference.expression, node.isTypeOnly);
      } else if (ts.isImportTypeNode(node)) {
        const literal = ts.isLiteralTypeNode(node.argument) ? node.argument.literal : undefined;
        checkSpecifier(node, literal !== undefined && ts.isStringLiteral(literal) ? literal : undefined, true);
      } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
        report(node, 'loading code (import())');
      } else if (ts.isAwaitExpression(node)) {
        report(node, 'asynchrony (await)');
      } else if (node.kind === ts.SyntaxKind.AsyncKeyword) {
        report(node, 'asynchrony (async)');
      } else if ((ts.isAsExpression(node) || ts.isTypeAssertionExpression(node)) && node.type.kind === ts.SyntaxKind.AnyKeyword) {
        report(node, 'an unchecked cast (as any)');
      } else if (ts.isIdentifier(node) && isReference(node)) {
        checkIdentifier(node);
      }
      ts.forEachChild(node, visit);
    };

    const checkIdentifier = (id: ts.Identifier): void => {
      const name = id.text;
      const parent = id.parent;
      if (name === 'Date') {
        if (!isGlobal(id)) return;
        if (ts.isNewExpression(parent) && parent.expression === id && (parent.arguments ?? []).length === 0) report(id, 'the clock (new Date())');
        else if (ts.isCallExpression(parent) && parent.expression === id) report(id, 'the clock (Date())');
        else if (memberName(parent, id) === 'now') report(id, 'the clock (Date.now)');
        return;
      }
      if (name === 'Math') {
        if (memberName(parent, id) === 'random' && isGlobal(id)) report(id, 'randomness (Math.random)');
        return;
      }
      const what = GLOBALS.get(name);
      if (what !== undefined && isGlobal(id)) report(id, what);
    };

    visit(source);
  }
  return violations;
}

/** The member `id.<name>` or `id['<name>']` reads, if `parent` reads one of `id`. */
function memberName(parent: ts.Node, id: ts.Identifier): string | undefined {
  if (ts.isPropertyAccessExpression(parent) && parent.expression === id) return parent.name.text;
  if (ts.isElementAccessExpression(parent) && parent.expression === id && ts.isStringLiteralLike(parent.argumentExpression)) {
    return parent.argumentExpression.text;
  }
  return undefined;
}

/**
 * Whether an identifier refers to something (a value or a type) rather than naming a member,
 * a property, a declaration or an import/export specifier's original name.
 */
function isReference(id: ts.Identifier): boolean {
  const parent = id.parent;
  if ((ts.isPropertyAccessExpression(parent) || ts.isQualifiedName(parent)) && (ts.isPropertyAccessExpression(parent) ? parent.name : parent.right) === id) return false;
  if ((ts.isPropertyAssignment(parent) || ts.isPropertyDeclaration(parent) || ts.isPropertySignature(parent) || ts.isMethodDeclaration(parent) || ts.isMethodSignature(parent) || ts.isGetAccessor(parent) || ts.isSetAccessor(parent) || ts.isEnumMember(parent)) && parent.name === id) return false;
  if ((ts.isImportSpecifier(parent) || ts.isExportSpecifier(parent)) && parent.propertyName === id) return false;
  if (ts.isLabeledStatement(parent) || ts.isBreakOrContinueStatement(parent)) return false;
  if (ts.isBindingElement(parent) && parent.propertyName === id) return false;
  // A declaration's own name declares, it does not refer (its symbol is then the file's own).
  return true;
}

/** The nearest node_modules/@types above `dir`. */
function findTypeRoots(dir: string): string {
  for (let at = resolve(dir); ; at = dirname(at)) {
    const candidate = join(at, 'node_modules', '@types');
    if (existsSync(candidate)) return candidate;
    if (dirname(at) === at) throw new Error(`no node_modules/@types above ${dir}`);
  }
}
