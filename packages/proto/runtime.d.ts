import type { Reader as ProtobufReader } from 'protobufjs/minimal.js';

/** protobufjs's Writer, which the generated code writes with. */
export declare const Writer: typeof import('protobufjs/minimal.js').Writer;

/** protobufjs's util, seen without Long support. */
export declare const util: typeof import('protobufjs/minimal.js').util;

/** protobufjs's Reader with 64-bit integers read as numbers, whatever the shared protobufjs's configuration. */
export interface Reader extends Omit<ProtobufReader, 'int64' | 'uint64' | 'sint64' | 'fixed64' | 'sfixed64'> {
  int64(): number;
  uint64(): number;
  /** An int64 exactly: a number when it is a safe integer, else a bigint. */
  int64Exact(): number | bigint;
}

export declare const Reader: {
  /** A reader over `buffer` (not copied). */
  create(buffer: Uint8Array): Reader;
};

/** A bigint as the low/high bits protobufjs's Writer encodes exactly; other values unchanged. */
export declare function long<T>(value: T | bigint): T | { low: number; high: number; unsigned: boolean };
