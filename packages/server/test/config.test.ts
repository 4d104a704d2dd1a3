/** The cluster secret in the node configuration (issue 12 item 4); the memory high watermark (spec 2). */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';

import { ConfigError, loadConfig } from '../src/config.js';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

const THREE = { nodeId: 'n1', peerListen: '127.0.0.1:8001', peers: 'n1=127.0.0.1:8001,n2=127.0.0.1:8002,n3=127.0.0.1:8003' };
const SECRET = '0123456789abcdef0123';

function tempFile(name: string, content: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'quorumq-config-'));
  dirs.push(dir);
  const file = join(dir, name);
  writeFileSync(file, content);
  return file;
}

describe('the cluster secret', () => {
  it('is required when the node has peers, and the error says how to set it without saying a secret', () => {
    expect(() => loadConfig(null, {}, THREE)).toThrow(ConfigError);
    expect(() => loadConfig(null, {}, THREE)).toThrow(/cluster secret is required.*QUORUMQ_CLUSTER_SECRET/);
  });

  it('is optional for a single node (which then serves no peer calls)', () => {
    expect(loadConfig(null, {}, { nodeId: 'n1' }).clusterSecret).toBeNull();
    expect(loadConfig(null, {}, { nodeId: 'n1', peers: 'n1=127.0.0.1:7001' }).clusterSecret).toBeNull();
  });

  it('comes from QUORUMQ_CLUSTER_SECRET, clusterSecret in the file, or a file of its own', () => {
    expect(loadConfig(null, { QUORUMQ_CLUSTER_SECRET: SECRET }, THREE).clusterSecret).toBe(SECRET);
    const config = tempFile('node.json', JSON.stringify({ ...THREE, clusterSecret: SECRET }));
    expect(loadConfig(config, {}).clusterSecret).toBe(SECRET);
    const secretFile = tempFile('secret', `  ${SECRET}\n`);
    expect(loadConfig(null, { QUORUMQ_CLUSTER_SECRET_FILE: secretFile }, THREE).clusterSecret).toBe(SECRET);
    expect(loadConfig(tempFile('node.json', JSON.stringify({ ...THREE, clusterSecretFile: secretFile })), {}).clusterSecret).toBe(SECRET);
  });

  it('refuses a short secret, an empty or missing file, and both ways at once', () => {
    expect(() => loadConfig(null, { QUORUMQ_CLUSTER_SECRET: 'short' }, THREE)).toThrow(/at least 16/);
    expect(() => loadConfig(null, { QUORUMQ_CLUSTER_SECRET_FILE: tempFile('empty', '\n') }, THREE)).toThrow(/cluster secret is required/);
    expect(() => loadConfig(null, { QUORUMQ_CLUSTER_SECRET_FILE: '/nonexistent/quorumq-secret' }, THREE)).toThrow(/cannot read/);
    const secretFile = tempFile('secret', SECRET);
    expect(() => loadConfig(null, { QUORUMQ_CLUSTER_SECRET: SECRET, QUORUMQ_CLUSTER_SECRET_FILE: secretFile }, THREE)).toThrow(/not both/);
    let message = '';
    try {
      loadConfig(null, { QUORUMQ_CLUSTER_SECRET: 'short-secret' }, THREE);
    } catch (error) {
      message = String(error);
    }
    expect(message).toMatch(/at least 16/);
    expect(message).not.toContain('short-secret');
  });
});

describe('the memory high watermark', () => {
  const ONE = { nodeId: 'n1' };

  it('is 0.4 of the memory limit by default, with no absolute bytes', () => {
    const config = loadConfig(null, {}, ONE);
    expect(config.memoryHighWatermark).toBe(0.4);
    expect(config.memoryHighWatermarkBytes).toBeNull();
  });

  it('comes from QUORUMQ_MEMORY_HIGH_WATERMARK(_BYTES) or the file', () => {
    const fromEnv = loadConfig(null, { QUORUMQ_MEMORY_HIGH_WATERMARK: '0.75', QUORUMQ_MEMORY_HIGH_WATERMARK_BYTES: '1073741824' }, ONE);
    expect([fromEnv.memoryHighWatermark, fromEnv.memoryHighWatermarkBytes]).toEqual([0.75, 1073741824]);
    const fromFile = loadConfig(tempFile('node.json', JSON.stringify({ ...ONE, memoryHighWatermark: 1, memoryHighWatermarkBytes: 0 })), {});
    expect([fromFile.memoryHighWatermark, fromFile.memoryHighWatermarkBytes]).toEqual([1, 0]);
    expect(loadConfig(tempFile('node.json', JSON.stringify({ ...ONE, memoryHighWatermarkBytes: null })), {}).memoryHighWatermarkBytes).toBeNull();
  });

  it('refuses a fraction outside (0, 1] and bytes that are not an integer >= 0, saying what it expected', () => {
    for (const bad of ['0', '-0.1', '1.5', '40%', 'NaN', 'Infinity']) {
      expect(() => loadConfig(null, { QUORUMQ_MEMORY_HIGH_WATERMARK: bad }, ONE)).toThrow(/memoryHighWatermark: expected a fraction above 0 and at most 1/);
    }
    expect(() => loadConfig(null, {}, { ...ONE, memoryHighWatermark: true })).toThrow(ConfigError);
    for (const bad of ['-1', '1.5', '2GiB']) {
      expect(() => loadConfig(null, { QUORUMQ_MEMORY_HIGH_WATERMARK_BYTES: bad }, ONE)).toThrow(/memoryHighWatermarkBytes: expected an integer >= 0/);
    }
  });
});
