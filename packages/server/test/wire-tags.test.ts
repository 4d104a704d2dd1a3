/**
 * The hand-written codecs' tags (@quorumq/proto's hand-tags.js) are the field numbers and
 * wire types proto/ declares, as buf compiled them. `npm run build` runs the same check
 * (scripts/generate.mjs) and fails on a difference.
 */
import { descriptorSetPath, handTags, varintTagged } from '@quorumq/proto';
import { descriptorTags, tagProblems } from '@quorumq/proto/tag-check';
import descriptor from 'protobufjs/ext/descriptor.js';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

const descriptors = readFileSync(descriptorSetPath);

/** The descriptor set with one field of one message changed. */
function withField(message: string, field: string, change: (f: { number: number; type: number }) => void): Uint8Array {
  const set = descriptor.FileDescriptorSet.decode(descriptors) as unknown as {
    file: Array<{ package: string; messageType: Array<{ name: string; field: Array<{ name: string; number: number; type: number }> }> }>;
  };
  const target = set.file.flatMap((f) => (f.package === 'quorumq.v1' ? f.messageType : [])).find((m) => m.name === message);
  const f = target?.field.find((x) => x.name === field);
  if (f === undefined) throw new Error(`no ${message}.${field}`);
  change(f);
  return descriptor.FileDescriptorSet.encode(set as never).finish();
}

describe('the hand-written tags', () => {
  it('equal the descriptors, every one', () => {
    expect(tagProblems(handTags, descriptors, varintTagged)).toEqual([]);
    const tags = descriptorTags(descriptors);
    for (const [message, fields] of Object.entries(handTags)) {
      for (const [field, tag] of Object.entries(fields)) expect(tags.get(`${message}.${field}`), `${message}.${field}`).toBe(tag);
    }
  });

  it('a renumbered field, a retyped one, or one that is gone is reported', () => {
    expect(tagProblems(handTags, withField('PublishRequest', 'sequence', (f) => (f.number = 7)), varintTagged)).toEqual([
      'PublishRequest.sequence: the hand-written codecs use 0x30 (field 6, wire type 0), proto/ says 0x38 (field 7, wire type 0)',
    ]);
    // string (9) instead of uint64 (4): another wire type.
    expect(tagProblems(handTags, withField('Entry', 'index', (f) => (f.type = 9)), varintTagged)).toEqual([
      'Entry.index: the hand-written codecs use 0x08 (field 1, wire type 0), proto/ says 0x0a (field 1, wire type 2)',
    ]);
    expect(tagProblems({ ...handTags, Delivery: { ...handTags.Delivery, priority: 0x48 } }, descriptors, varintTagged)).toEqual([
      'Delivery.priority: proto/ has no such field (hand tag 0x48 (field 9, wire type 0))',
    ]);
  });

  it('a tag of two bytes is refused: the hand-written codecs write one, except where they write varints', () => {
    expect(tagProblems({ RaftMessage: { snapshot: 0x92 } }, descriptors, varintTagged)).toEqual([
      'RaftMessage.snapshot: tag 0x92 (field 18, wire type 2) takes two bytes; the hand-written codecs write one',
    ]);
    // QueueCommand's cases from field 16 take two bytes; the one-command entry writer writes them as varints.
    expect(handTags.QueueCommand.moveCancel).toBeGreaterThan(0x7f);
    expect(tagProblems({ QueueCommand: handTags.QueueCommand }, descriptors, varintTagged)).toEqual([]);
    expect(tagProblems({ QueueCommand: handTags.QueueCommand }, descriptors)).toHaveLength(4);
  });
});
