/** The cluster secret in the node configuration (issue 12 item 4); the memory high watermark (spec 2). */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeClusterCertificates, type ClusterCertificates } from '@quorumq/cli';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';

import { ConfigError, loadConfig } from '../src/config.js';

const dirs: string[] = [];
/** Removed after the file (the TLS tests share their certificates). */
const lasting: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});
afterAll(() => {
  for (const dir of lasting.splice(0)) rmSync(dir, { recursive: true, force: true });
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

describe('authentication settings (issue 17)', () => {
  it('are off by default, on with QUORUMQ_REQUIRE_AUTHENTICATION, and refuse a value that is not a boolean', () => {
    expect(loadConfig(null, {}, { nodeId: 'n1' })).toMatchObject({ requireAuthentication: false, admin: null });
    expect(loadConfig(null, { QUORUMQ_REQUIRE_AUTHENTICATION: 'true' }, { nodeId: 'n1' }).requireAuthentication).toBe(true);
    expect(() => loadConfig(null, { QUORUMQ_REQUIRE_AUTHENTICATION: 'yes please' }, { nodeId: 'n1' })).toThrow(/requireAuthentication: expected true or false/);
  });

  it('take the first administrator from the environment or a password file, and refuse a short or missing password', () => {
    const env = { QUORUMQ_ADMIN_USER: 'admin', QUORUMQ_ADMIN_PASSWORD: 'long-enough-password' };
    expect(loadConfig(null, env, { nodeId: 'n1' }).admin).toEqual({ user: 'admin', password: 'long-enough-password' });
    const file = tempFile('admin-password', '  from-a-file-123\n');
    expect(loadConfig(null, { QUORUMQ_ADMIN_USER: 'admin', QUORUMQ_ADMIN_PASSWORD_FILE: file }, { nodeId: 'n1' }).admin?.password).toBe('from-a-file-123');
    expect(() => loadConfig(null, { QUORUMQ_ADMIN_USER: 'admin' }, { nodeId: 'n1' })).toThrow(/needs a password of at least 12 characters/);
    expect(() => loadConfig(null, { QUORUMQ_ADMIN_USER: 'admin', QUORUMQ_ADMIN_PASSWORD: 'short' }, { nodeId: 'n1' })).toThrow(/at least 12/);
    expect(() => loadConfig(null, { QUORUMQ_ADMIN_PASSWORD: 'long-enough-password' }, { nodeId: 'n1' })).toThrow(/without adminUser/);
    expect(() => loadConfig(null, { QUORUMQ_ADMIN_USER: 'a:b', QUORUMQ_ADMIN_PASSWORD: 'long-enough-password' }, { nodeId: 'n1' })).toThrow(/adminUser: .*":"/);
  });
});

describe('the listeners (issue 17)', () => {
  const secret = { clusterSecret: SECRET };

  it('a node with peers needs a peer listener on another address than the client one', () => {
    const config = loadConfig(null, {}, { ...THREE, ...secret, listen: '127.0.0.1:7001' });
    expect([config.listen, config.advertise, config.peerListen, config.peerAdvertise]).toEqual(['127.0.0.1:7001', '127.0.0.1:7001', '127.0.0.1:8001', '127.0.0.1:8001']);
    expect(() => loadConfig(null, {}, { ...THREE, ...secret, peerListen: undefined })).toThrow(/no peer listener: set peerListen \(QUORUMQ_PEER_LISTEN\)/);
    expect(() => loadConfig(null, {}, { ...THREE, ...secret, listen: '127.0.0.1:8001' })).toThrow(/peerListen \(127.0.0.1:8001\) and listen \(127.0.0.1:8001\) are the same address/);
    expect(() => loadConfig(null, {}, { ...THREE, ...secret, listen: '0.0.0.0:8001', advertise: 'n1:7001' })).toThrow(/are the same address/);
    expect(() => loadConfig(null, {}, { ...THREE, ...secret, peerAdvertise: '127.0.0.1:9999' })).toThrow(/peerAdvertise .* must be the same address/);
  });

  it('refuses a configuration from before the peer listener (peers naming the client port), saying what to set', () => {
    const old = { nodeId: 'n1', listen: '127.0.0.1:7001', peers: 'n1=127.0.0.1:7001,n2=127.0.0.1:7002,n3=127.0.0.1:7003', ...secret };
    expect(() => loadConfig(null, {}, old)).toThrow(ConfigError);
    expect(() => loadConfig(null, {}, old)).toThrow(/peers.n1 \(127.0.0.1:7001\) is this node's client address.*set peerListen \(QUORUMQ_PEER_LISTEN\)/);
    // The compose file's old form: bound on every interface, advertised by name.
    const compose = { nodeId: 'n1', listen: '0.0.0.0:7001', peerListen: '0.0.0.0:7101', advertise: 'n1:7001', peers: 'n1=n1:7001,n2=n2:7001,n3=n3:7001', ...secret };
    expect(() => loadConfig(null, {}, compose)).toThrow(/peers.n1 \(n1:7001\) is this node's client address/);
    expect(loadConfig(null, {}, { ...compose, peers: 'n1=n1:7101,n2=n2:7101,n3=n3:7101' }).peerAdvertise).toBe('n1:7101');
  });

  it('a single node may run without a peer listener, its own address in peers being its client one', () => {
    const config = loadConfig(null, {}, { nodeId: 'n1', listen: '127.0.0.1:7001' });
    expect([config.peerListen, config.peerAdvertise, config.peers.get('n1')]).toEqual([null, null, '127.0.0.1:7001']);
    expect(loadConfig(null, {}, { nodeId: 'n1', peers: 'n1=127.0.0.1:7001' }).peerListen).toBeNull();
  });

  it('refuses an address that is no host:port', () => {
    expect(() => loadConfig(null, {}, { ...THREE, ...secret, peerListen: 'localhost' })).toThrow(/peerListen: expected host:port/);
  });
});

describe('TLS options (issue 17)', () => {
  let certs: ClusterCertificates;
  let other: ClusterCertificates;
  beforeAll(() => {
    const dir = mkdtempSync(join(tmpdir(), 'quorumq-config-tls-'));
    lasting.push(dir);
    certs = makeClusterCertificates(join(dir, 'a'), ['n1', 'n2', 'n3']);
    other = makeClusterCertificates(join(dir, 'b'), ['n1']);
  });
  const n1 = () => certs.nodes.get('n1')!;
  const peerTls = () => ({ peerTlsCertFile: n1().cert, peerTlsKeyFile: n1().key, peerTlsCaFile: certs.ca.cert });

  it('client TLS: certificate and key, client certificates none, optional or required against a CA', () => {
    expect(loadConfig(null, {}, { nodeId: 'n1' }).tls).toBeNull();
    const env = { QUORUMQ_TLS_CERT_FILE: n1().cert, QUORUMQ_TLS_KEY_FILE: n1().key };
    expect(loadConfig(null, env, { nodeId: 'n1' }).tls).toEqual({ certFile: n1().cert, keyFile: n1().key, caFile: null, clientCerts: 'none' });
    expect(loadConfig(null, { ...env, QUORUMQ_TLS_CA_FILE: certs.ca.cert, QUORUMQ_TLS_CLIENT_CERTS: 'required' }, { nodeId: 'n1' }).tls?.clientCerts).toBe('required');
    expect(loadConfig(null, { ...env, QUORUMQ_TLS_REFRESH_MS: '250' }, { nodeId: 'n1' }).tlsRefreshMs).toBe(250);
    expect(loadConfig(null, {}, { nodeId: 'n1' }).tlsRefreshMs).toBe(60_000);
  });

  it('client TLS: refuses half a configuration, a key of another certificate, unreadable files, an unknown mode', () => {
    const one = { nodeId: 'n1' };
    expect(() => loadConfig(null, { QUORUMQ_TLS_CERT_FILE: n1().cert }, one)).toThrow(/needs both tlsCertFile and tlsKeyFile/);
    expect(() => loadConfig(null, { QUORUMQ_TLS_CERT_FILE: n1().cert, QUORUMQ_TLS_KEY_FILE: other.nodes.get('n1')!.key }, one)).toThrow(/tlsKeyFile: the key in .* does not belong to the certificate/);
    expect(() => loadConfig(null, { QUORUMQ_TLS_CERT_FILE: '/nonexistent/cert.pem', QUORUMQ_TLS_KEY_FILE: n1().key }, one)).toThrow(/tlsCertFile: cannot read/);
    expect(() => loadConfig(null, { QUORUMQ_TLS_CERT_FILE: n1().key, QUORUMQ_TLS_KEY_FILE: n1().key }, one)).toThrow(/tlsCertFile: .* holds no PEM certificate/);
    const both = { QUORUMQ_TLS_CERT_FILE: n1().cert, QUORUMQ_TLS_KEY_FILE: n1().key };
    expect(() => loadConfig(null, { ...both, QUORUMQ_TLS_CLIENT_CERTS: 'required' }, one)).toThrow(/tlsClientCerts required needs tlsCaFile/);
    expect(() => loadConfig(null, { ...both, QUORUMQ_TLS_CA_FILE: certs.ca.cert }, one)).toThrow(/set tlsClientCerts to optional or required/);
    expect(() => loadConfig(null, { ...both, QUORUMQ_TLS_CLIENT_CERTS: 'sometimes' }, one)).toThrow(/tlsClientCerts: expected one of none, optional, required/);
    expect(() => loadConfig(null, { QUORUMQ_TLS_CA_FILE: certs.ca.cert }, one)).toThrow(/need TLS on the client listener/);
  });

  it('peer mutual TLS makes the cluster secret optional (still used when set); with neither, a node with peers does not start', () => {
    const config = loadConfig(null, {}, { ...THREE, ...peerTls() });
    expect(config.clusterSecret).toBeNull();
    expect(config.peerTls).toEqual({ certFile: n1().cert, keyFile: n1().key, caFile: certs.ca.cert });
    expect(loadConfig(null, {}, { ...THREE, ...peerTls(), clusterSecret: SECRET }).clusterSecret).toBe(SECRET);
    expect(() => loadConfig(null, {}, THREE)).toThrow(/cluster secret is required.*or with mutual TLS between the nodes/);
  });

  it('peer mutual TLS: all three files, a certificate naming this node, and a peer listener', () => {
    expect(() => loadConfig(null, {}, { ...THREE, peerTlsCertFile: n1().cert, peerTlsKeyFile: n1().key })).toThrow(/needs all three of peerTlsCertFile, peerTlsKeyFile and peerTlsCaFile/);
    const n2 = certs.nodes.get('n2')!;
    expect(() => loadConfig(null, {}, { ...THREE, peerTlsCertFile: n2.cert, peerTlsKeyFile: n2.key, peerTlsCaFile: certs.ca.cert })).toThrow(
      /peerTlsCertFile: the certificate in .* names n2, n2, localhost, not this node \(n1\)/,
    );
    expect(() => loadConfig(null, {}, { nodeId: 'n1', ...peerTls() })).toThrow(/there is no peer listener: set peerListen/);
  });
});

describe("V8's helper threads at SCHED_IDLE", () => {
  it('is on by default; false in the file or QUORUMQ_IDLE_HELPER_THREADS turns it off; anything else is refused', () => {
    expect(loadConfig(null, {}, { nodeId: 'n1' }).idleHelperThreads).toBe(true);
    expect(loadConfig(null, { QUORUMQ_IDLE_HELPER_THREADS: 'false' }, { nodeId: 'n1' }).idleHelperThreads).toBe(false);
    expect(loadConfig(tempFile('node.json', JSON.stringify({ nodeId: 'n1', idleHelperThreads: false })), {}).idleHelperThreads).toBe(false);
    expect(loadConfig(null, { QUORUMQ_IDLE_HELPER_THREADS: 'true' }, { nodeId: 'n1' }).idleHelperThreads).toBe(true);
    expect(() => loadConfig(null, { QUORUMQ_IDLE_HELPER_THREADS: 'sometimes' }, { nodeId: 'n1' })).toThrow(/idleHelperThreads must be true or false/);
  });
});

describe('the warm-up before serving', () => {
  it('warms up by default; false in the file or QUORUMQ_WARM_UP turns it off; anything else is refused', () => {
    expect(loadConfig(null, {}, { nodeId: 'n1' }).warmUp).toBe(true);
    expect(loadConfig(null, { QUORUMQ_WARM_UP: 'false' }, { nodeId: 'n1' }).warmUp).toBe(false);
    expect(loadConfig(tempFile('node.json', JSON.stringify({ nodeId: 'n1', warmUp: false })), {}).warmUp).toBe(false);
    expect(() => loadConfig(null, { QUORUMQ_WARM_UP: 'sometimes' }, { nodeId: 'n1' })).toThrow(/warmUp must be true or false/);
  });
});
