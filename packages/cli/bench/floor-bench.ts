/**
 * `npm run bench:floor`: what the machine allows a three-process Node.js cluster at best, in
 * `run.sh`'s shape (../shared/compare), with none of quorumq's own work. Three processes play
 * a leader and two followers; a fourth, fresh for each run, plays the publisher:
 *
 * - the publisher sends 1 KiB messages on one HTTP/2 stream in gRPC's framing and counts a
 *   message confirmed when the leader says so (`--messages` at 256 in flight, then, in a new
 *   process, `--messages1` at one in flight: `run.sh`'s 50,000 and 3,000);
 * - the leader numbers each turn's messages, sends them at once as one framed message to the
 *   first follower, holds them for the second up to 20 ms unless the first has some
 *   unanswered (as `transport.ts` does), writes them with one `O_DSYNC` write on its event
 *   loop a turn later, and confirms a message once its own write and one follower's have it;
 * - a follower writes each append it reads with one `O_DSYNC` write on its event loop and
 *   answers with the highest number it holds.
 *
 * Nothing else: no Raft, no protobuf, no queue, no metrics. The node processes run with the
 * flags and helper-thread priority of quorumq's nodes (`localNodeFlags`, `idleHelperThreads`).
 * Each round starts three new processes; figures are per round and the median of `--rounds`
 * (default 3). CPU per message counts all four processes (from /proc), as `run.sh` does.
 * A figure here that is no better than a system under comparison is one no Node.js broker of
 * this shape can beat on this machine; quorumq's distance from it is its own work.
 */
import { freePort, idleHelperThreads, localNodeFlags } from '@quorumq/cli';
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, constants, mkdtempSync, openSync, readFileSync, rmSync, writeSync, writevSync } from 'node:fs';
import * as http2 from 'node:http2';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const SELF = fileURLToPath(import.meta.url);
const WINDOW = 1 << 20;
const HOLD_MS = 20;
const FILE_BYTES = 128 << 20;
const GRPC_HEADERS = { ':method': 'POST', 'content-type': 'application/grpc', te: 'trailers' };

/** One gRPC length-prefixed message. */
function frame(payload: Buffer): Buffer {
  const header = Buffer.allocUnsafe(5);
  header[0] = 0;
  header.writeUInt32BE(payload.length, 1);
  return Buffer.concat([header, payload]);
}

/** Splits a byte stream into gRPC messages. */
class Deframer {
  private pending: Buffer = Buffer.alloc(0);
  push(chunk: Buffer, each: (message: Buffer) => void): void {
    let buf = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk]);
    while (buf.length >= 5) {
      const len = buf.readUInt32BE(1);
      if (buf.length < 5 + len) break;
      each(buf.subarray(5, 5 + len));
      buf = buf.subarray(5 + len);
    }
    this.pending = buf;
  }
}

const u64 = (n: number): Buffer => {
  const b = Buffer.allocUnsafe(8);
  b.writeBigUInt64BE(BigInt(n));
  return b;
};

/** A log file of zeros already written, opened O_DSYNC, as quorumq's preallocated WAL segments. */
function openLog(path: string): number {
  const fd = openSync(path, 'w+');
  const zeros = Buffer.alloc(1 << 20);
  for (let at = 0; at < FILE_BYTES; at += zeros.length) writeSync(fd, zeros, 0, zeros.length, at);
  closeSync(fd);
  return openSync(path, constants.O_RDWR | constants.O_DSYNC);
}

async function follower(port: number, file: string): Promise<void> {
  await idleHelperThreads();
  const fd = openLog(file);
  let at = 0;
  const server = http2.createServer({ settings: { initialWindowSize: WINDOW } });
  server.on('session', (session) => {
    session.setLocalWindowSize(8 * WINDOW);
    session.on('error', () => undefined);
  });
  server.on('stream', (stream) => {
    stream.respond({ ':status': 200, 'content-type': 'application/grpc' });
    stream.on('error', () => undefined);
    const deframer = new Deframer();
    stream.on('data', (chunk: Buffer) => {
      // One write and one answer per read, however many appends it carried.
      const appends: Buffer[] = [];
      deframer.push(chunk, (m) => appends.push(m));
      if (appends.length === 0) return;
      let bytes = 0;
      for (const a of appends) bytes += a.length;
      writevSync(fd, appends, at);
      at = (at + bytes) % (FILE_BYTES - (1 << 20));
      const last = appends[appends.length - 1]!;
      stream.write(frame(last.subarray(0, 8)));
    });
  });
  server.listen(port, '127.0.0.1', () => process.send?.('ready'));
}

async function leader(port: number, peerPorts: number[], file: string): Promise<void> {
  await idleHelperThreads();
  const fd = openLog(file);
  let at = 0;
  let nextIndex = 1;
  let durable = 0;
  const acked = [0, 0];
  // The highest index sent to the eager follower (the first).
  let sentToEager = 0;
  let turn: Buffer[] = [];
  let turnScheduled = false;
  const toWrite: Buffer[] = [];
  let queuedUpTo = 0;
  let writeScheduled = false;
  const held: Buffer[] = [];
  let holdTimer: NodeJS.Timeout | null = null;
  // The confirms owed, oldest first: [last index of a client turn, stream, messages read on it].
  const owed: Array<[number, http2.ServerHttp2Stream, number]> = [];

  const peers = peerPorts.map((p, i) => {
    const session = http2.connect(`http://127.0.0.1:${p}`, { settings: { initialWindowSize: WINDOW } });
    session.on('connect', () => session.setLocalWindowSize(8 * WINDOW));
    const stream = session.request({ ...GRPC_HEADERS, ':path': '/floor.v1.Peer/Append' });
    const deframer = new Deframer();
    stream.on('data', (chunk: Buffer) => {
      deframer.push(chunk, (m) => {
        acked[i] = Math.max(acked[i]!, Number(m.readBigUInt64BE(0)));
      });
      confirm();
    });
    return stream;
  });

  const sendHeld = (): void => {
    if (holdTimer !== null) clearTimeout(holdTimer);
    holdTimer = null;
    if (held.length === 0) return;
    peers[1]!.write(Buffer.concat(held.splice(0).map(frame)));
  };

  const confirm = (): void => {
    const committed = Math.min(durable, Math.max(acked[0]!, acked[1]!));
    while (owed.length > 0 && owed[0]![0] <= committed) {
      const [, stream, count] = owed.shift()!;
      stream.write(frame(u64(count)));
    }
  };

  const endOfTurn = (): void => {
    turnScheduled = false;
    const entries = Buffer.concat(turn.splice(0));
    const last = nextIndex - 1;
    // [last index][entries]: the append every follower writes as it is.
    const append = Buffer.concat([u64(last), entries]);
    const eagerBusy = sentToEager > acked[0]!;
    peers[0]!.write(frame(append));
    sentToEager = last;
    held.push(append);
    if (eagerBusy) sendHeld();
    else if (holdTimer === null) holdTimer = setTimeout(sendHeld, HOLD_MS);
    toWrite.push(append);
    queuedUpTo = last;
    if (!writeScheduled) {
      writeScheduled = true;
      setImmediate(() => {
        writeScheduled = false;
        let bytes = 0;
        for (const b of toWrite) bytes += b.length;
        const upTo = queuedUpTo;
        writevSync(fd, toWrite.splice(0), at);
        at = (at + bytes) % (FILE_BYTES - (1 << 20));
        durable = upTo;
        confirm();
      });
    }
  };

  const server = http2.createServer({ settings: { initialWindowSize: WINDOW } });
  server.on('session', (session) => {
    session.setLocalWindowSize(8 * WINDOW);
    session.on('error', () => undefined);
  });
  server.on('stream', (stream) => {
    stream.respond({ ':status': 200, 'content-type': 'application/grpc' });
    stream.on('error', () => undefined);
    const deframer = new Deframer();
    let read = 0;
    stream.on('data', (chunk: Buffer) => {
      deframer.push(chunk, (m) => {
        turn.push(u64(nextIndex), m);
        nextIndex++;
        read++;
      });
      owed.push([nextIndex - 1, stream, read]);
      if (!turnScheduled) {
        turnScheduled = true;
        queueMicrotask(endOfTurn);
      }
    });
  });
  server.listen(port, '127.0.0.1', () => process.send?.('ready'));
}

/** CPU seconds of each of `pids` (from /proc), then of this process. */
function cpuSeconds(pids: number[]): number[] {
  const each = pids.map((pid) => {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12])) / 100;
  });
  const own = process.cpuUsage();
  return [...each, (own.user + own.system) / 1e6];
}

/** The publisher: N messages, W in flight; prints one JSON line. */
async function client(n: number, w: number, port: number, pids: number[]): Promise<void> {
  const session = http2.connect(`http://127.0.0.1:${port}`, { settings: { initialWindowSize: WINDOW } });
  await new Promise<void>((resolve) => session.on('connect', () => resolve()));
  session.setLocalWindowSize(8 * WINDOW);
  const stream = session.request({ ...GRPC_HEADERS, ':path': '/floor.v1.Broker/Publish' });
  const body = frame(Buffer.alloc(1024, 120));
  const starts: bigint[] = [];
  const latencies: number[] = [];
  let sent = 0;
  let confirmed = 0;
  const deframer = new Deframer();
  const c0 = cpuSeconds(pids);
  const t0 = process.hrtime.bigint();
  await new Promise<void>((resolve) => {
    const pump = (): void => {
      while (sent < n && sent - confirmed < w) {
        starts.push(process.hrtime.bigint());
        sent++;
        stream.write(body);
      }
    };
    stream.on('data', (chunk: Buffer) => {
      deframer.push(chunk, (m) => {
        const upTo = Number(m.readBigUInt64BE(0));
        const now = process.hrtime.bigint();
        while (confirmed < upTo) latencies.push(Number(now - starts[confirmed++]!) / 1000);
      });
      if (confirmed >= n) resolve();
      else pump();
    });
    pump();
  });
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const c1 = cpuSeconds(pids);
  const perMessage = c1.map((c, i) => Math.round(((c - c0[i]!) / n) * 1e6));
  const cpu = perMessage.reduce((a, b) => a + b, 0);
  latencies.sort((a, b) => a - b);
  const pct = (p: number): number => Math.round(latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * p))]!);
  console.log(JSON.stringify({ system: 'floor', n, size: 1024, window: w, publish_per_s: Math.round(n / seconds), confirm_p50_us: pct(0.5), confirm_p99_us: pct(0.99), pub_cpu_us_per_msg: cpu, pub_cpu_us_by_process: perMessage }));
  session.destroy();
}

function start(args: string[], node: boolean): ChildProcess {
  const flags = node ? localNodeFlags() : [];
  return spawn(process.execPath, [...flags, SELF, ...args], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
}

const ready = (child: ChildProcess): Promise<void> =>
  new Promise((resolve, reject) => {
    child.once('message', () => resolve());
    child.once('exit', (code, signal) => reject(new Error(`a floor process exited before it listened (${signal ?? code})`)));
  });
const exited = (child: ChildProcess): Promise<void> => new Promise((resolve) => child.once('exit', () => resolve()));
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!;

async function orchestrate(): Promise<void> {
  const args = new Map<string, string>();
  for (let i = 2; i < process.argv.length; i += 2) args.set(process.argv[i]!.replace(/^--/, ''), process.argv[i + 1] ?? '');
  const rounds = Number(args.get('rounds') ?? 3);
  const n256 = Number(args.get('messages') ?? 50_000);
  const n1 = Number(args.get('messages1') ?? 3_000);
  const results: Array<Record<string, number>> = [];
  // Per process: the followers, the leader, the publisher.
  for (let r = 1; r <= rounds; r++) {
    const dir = mkdtempSync(join(tmpdir(), 'quorumq-floor-'));
    const [base, f1, f2] = [await freePort(), await freePort(), await freePort()];
    const nodes = [
      start(['follower', String(f1), join(dir, 'f1')], true),
      start(['follower', String(f2), join(dir, 'f2')], true),
    ];
    await Promise.all(nodes.map(ready));
    nodes.push(start(['leader', String(base), String(f1), String(f2), join(dir, 'l')], true));
    await ready(nodes[2]!);
    await new Promise((resolve) => setTimeout(resolve, 2000));
    const pids = nodes.map((c) => c.pid!).join(',');
    for (const [n, w] of [[n256, 256], [n1, 1]] as const) {
      const c = spawn(process.execPath, [SELF, 'client', String(n), String(w), String(base), pids], { stdio: ['ignore', 'pipe', 'inherit'] });
      let out = '';
      c.stdout!.on('data', (d: Buffer) => (out += d.toString()));
      await exited(c);
      process.stdout.write(`round ${r} ${out}`);
      results.push(JSON.parse(out) as Record<string, number>);
    }
    for (const c of nodes) c.kill('SIGKILL');
    await Promise.all(nodes.map(exited));
    rmSync(dir, { recursive: true, force: true });
  }
  for (const w of [256, 1]) {
    const rs = results.filter((x) => x.window === w);
    const m = (k: string): number => median(rs.map((x) => x[k]!));
    console.log(`floor, ${w} in flight, medians of ${rs.length}: ${m('publish_per_s')} publishes/s, confirm p50 ${(m('confirm_p50_us') / 1000).toFixed(2)} ms, p99 ${(m('confirm_p99_us') / 1000).toFixed(2)} ms, ${m('pub_cpu_us_per_msg')} µs of CPU per message`);
  }
}

const [role, ...rest] = process.argv.slice(2);
if (role === 'follower') await follower(Number(rest[0]), rest[1]!);
else if (role === 'leader') await leader(Number(rest[0]), [Number(rest[1]), Number(rest[2])], rest[3]!);
else if (role === 'client') await client(Number(rest[0]), Number(rest[1]), Number(rest[2]), rest[3]!.split(',').map(Number));
else await orchestrate();
