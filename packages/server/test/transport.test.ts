import { Server, ServerCredentials } from '@grpc/grpc-js';
import { RaftTransportService } from '@quorumq/proto';
import type { Message } from '@quorumq/raft';
import { pino } from 'pino';
import { Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';

import type { GroupMessage } from '../src/raft-codec.js';
import { PeerTransport, raftStreamHandler } from '../src/transport.js';

const closers: Array<() => void> = [];
afterEach(() => {
  for (const close of closers.splice(0)) close();
});

/** A node's Raft stream endpoint on a free loopback port. */
async function endpoint(selfId: string, received: GroupMessage[], refused: Array<[string, string]>): Promise<string> {
  const server = new Server();
  server.addService(RaftTransportService, {
    stream: raftStreamHandler(selfId, (m) => received.push(m), (to, from) => refused.push([to, from])),
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (error, bound) => (error ? reject(error) : resolve(bound))),
  );
  closers.push(() => server.forceShutdown());
  return `127.0.0.1:${port}`;
}

function capturingLogger(lines: string[]) {
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(chunk.toString());
      done();
    },
  });
  return pino({ level: 'info' }, sink);
}

const heartbeat = (to: string): Message => ({ type: 'heartbeat', from: 'n2', to, term: 3, commit: 7, readSeq: 0 });

async function until(condition: () => boolean, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!condition() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
}

describe('peer streams', () => {
  it('deliver messages addressed to the node', async () => {
    const received: GroupMessage[] = [];
    const address = await endpoint('n1', received, []);
    const transport = new PeerTransport('n2', new Map([['n1', address]]), capturingLogger([]));
    closers.push(() => transport.close());
    transport.send('meta', [heartbeat('n1')]);
    await until(() => received.length > 0);
    expect(received).toEqual([{ groupId: 'meta', message: heartbeat('n1') }]);
  });

  it('keepAlive reopens a peer stream with nothing to send, so the peer reads as reachable', async () => {
    const address = await endpoint('n1', [], []);
    const transport = new PeerTransport('n2', new Map([['n1', address]]), capturingLogger([]));
    closers.push(() => transport.close());
    expect(transport.isConnected('n1')).toBe(false);
    transport.keepAlive();
    await until(() => transport.isConnected('n1'));
    expect(transport.isConnected('n1')).toBe(true);
  });

  it('a node refuses messages for another node (a stale address) and the sender resolves the name again', async () => {
    // n2 believes n3 lives at n1's address: what a container restart with a reused IP does.
    const received: GroupMessage[] = [];
    const refused: Array<[string, string]> = [];
    const address = await endpoint('n1', received, refused);
    const lines: string[] = [];
    const transport = new PeerTransport('n2', new Map([['n3', address]]), capturingLogger(lines));
    closers.push(() => transport.close());
    for (let i = 0; i < 20 && refused.length === 0; i++) {
      transport.send('meta', [heartbeat('n3')]);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect(refused[0]).toEqual(['n3', 'n2']);
    expect(received).toEqual([]);
    await until(() => lines.some((line) => line.includes('peer address reached another node')));
    expect(lines.find((line) => line.includes('peer address reached another node'))).toMatch(/WRONG_NODE: this is node n1, not n3/);
  });
});
