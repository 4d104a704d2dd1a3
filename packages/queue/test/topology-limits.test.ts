import { describe, expect, it } from 'vitest';

import { utf8ByteLength } from '../src/topology/limits.js';

describe('utf8ByteLength', () => {
  it('counts what UTF-8 encoding produces, for every class of code point', () => {
    const samples = [
      '',
      'orders.eu',
      'café',
      'ключ',
      '路由键',
      'emoji 🐇 and 𝄞',
      '\u007f\u0080\u07ff\u0800\uffff',
      'lone \ud800 high',
      'lone \udc00 low',
      'pair at end \ud83d\udc07',
      'high at end \ud83d',
    ];
    const encoder = new TextEncoder();
    for (const text of samples) expect(utf8ByteLength(text), JSON.stringify(text)).toBe(encoder.encode(text).byteLength);
  });

  it('agrees with the encoder on random strings over the whole UTF-16 range', () => {
    const encoder = new TextEncoder();
    let seed = 12345;
    const next = (): number => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed;
    };
    for (let n = 0; n < 2000; n++) {
      const codes = Array.from({ length: next() % 12 }, () => next() % 0x10000);
      const text = String.fromCharCode(...codes);
      expect(utf8ByteLength(text)).toBe(encoder.encode(text).byteLength);
    }
  });
});
