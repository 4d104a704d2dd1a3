/**
 * The error vocabulary (@quorumq/proto/errors) lists every reason a node sends: the reasons
 * written in the server's source, and the machine and topology codes it passes through.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { Reason, type ReasonName } from '@quorumq/proto/errors';
import type { ErrorCode } from '@quorumq/queue';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

import type { MetaErrorCode } from '../src/meta-machine.js';

const PROTO = resolve(import.meta.dirname, '..', '..', 'proto');
const SERVER_SRC = resolve(import.meta.dirname, '..', 'src');

/** The calls whose argument at that position is a reason. */
const REASON_ARGUMENT: Readonly<Record<string, number>> = {
  notFound: 0,
  failedPrecondition: 0,
  unavailable: 0,
  resourceExhausted: 0,
  invalidArgument: 1,
  BrokerError: 1,
  ForwardError: 1,
};

/** Every reason literal in `source`: reason arguments, and `reason` / `errorReason` properties that look like one. */
function reasonLiterals(file: string): string[] {
  const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const visit = (node: ts.Node): void => {
    if ((ts.isCallExpression(node) || ts.isNewExpression(node)) && ts.isIdentifier(node.expression)) {
      const at = REASON_ARGUMENT[node.expression.text];
      const argument = at === undefined ? undefined : node.arguments?.[at];
      if (argument !== undefined && ts.isStringLiteral(argument)) found.push(argument.text);
    }
    if (ts.isPropertyAssignment(node) && ts.isIdentifier(node.name) && ['reason', 'errorReason'].includes(node.name.text)) {
      if (ts.isStringLiteral(node.initializer) && /^[A-Z][A-Z0-9_]+$/.test(node.initializer.text)) found.push(node.initializer.text);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

describe('the reasons a node sends', () => {
  it('each is named by itself, and the declaration lists the same ones as the module', () => {
    for (const [name, value] of Object.entries(Reason)) expect(value).toBe(name);
    const declared = [...readFileSync(join(PROTO, 'errors.d.ts'), 'utf8').matchAll(/readonly ([A-Z_]+): '([A-Z_]+)';/g)].map((m) => m[1]);
    expect(declared).toEqual(Object.keys(Reason));
    expect(Object.isFrozen(Reason)).toBe(true);
  });

  it('every reason literal in the server is in the list', () => {
    const files = readdirSync(SERVER_SRC).filter((name) => name.endsWith('.ts'));
    const literals = files.flatMap((name) => reasonLiterals(join(SERVER_SRC, name)).map((reason) => ({ file: name, reason })));
    // The scan sees the reasons still written as literals (node.ts and service.ts, today).
    expect(literals.length).toBeGreaterThan(0);
    const known = new Set<string>(Object.values(Reason));
    expect(literals.filter(({ reason }) => !known.has(reason))).toEqual([]);
  });

  it('the machine\'s and the topology\'s codes a node passes through as reasons are in the list', () => {
    // service.ts: FAILED_PRECONDITION goes out as PRECONDITION_FAILED, QUEUE_DELETED as
    // QUEUE_NOT_FOUND; meta-machine.ts: NOT_FOUND and FAILED_PRECONDITION get reasons of their own.
    // At compile time (a code missing from the list makes `true` unassignable)...
    const machine: [Exclude<ErrorCode, ReasonName | 'FAILED_PRECONDITION'>] extends [never] ? true : false = true;
    const topology: [Exclude<MetaErrorCode, ReasonName | 'NOT_FOUND' | 'FAILED_PRECONDITION'>] extends [never] ? true : false = true;
    expect([machine, topology]).toEqual([true, true]);
    // ...and at run time.
    const passed: readonly string[] = ['INVALID_ARGUMENT', 'UNKNOWN_CONSUMER', 'CONSUMER_EXISTS', 'UNKNOWN_DELIVERY_TAG', 'RESOURCE_LOCKED', 'PERMISSION_DENIED', 'RESOURCE_EXHAUSTED'];
    for (const code of passed) expect(Object.values(Reason)).toContain(code);
  });
});
