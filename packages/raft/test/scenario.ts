/**
 * A small interpreter for scenario scripts in the style of etcd-io/raft's datadriven
 * `testdata/*.txt` files. A script is a list of cases; each case is a command line, a
 * `----` separator and the expected output, ending at a blank line:
 *
 *     # comments and blank lines between cases are kept
 *     add-nodes 3
 *     ----
 *     added 1 2 3
 *
 * Commands (node ids are 1, 2, ...):
 *   add-nodes <n> [pre-vote=bool] [check-quorum=bool] [election=N] [heartbeat=N] [max-entries=N]
 *             [max-bytes=N] [inflight=N] [chunk=N] [retain=N] [promote-learners=bool] [seed=N]
 *       the first call creates the group; later calls add nodes that join it (no config)
 *   set-log <id> <term>[*<count>] ...      replace a node's durable log (commit 0), restart it
 *   campaign <id>                          tick one node until its election timer fires
 *   elect <id>                             campaign and stabilize quietly until it leads
 *   tick <id> [n] | tick-all [n]           tick without processing Readys
 *   run [n]                                n x (tick-all, stabilize), printing role changes and a summary
 *   propose <id> <data> | propose-conf-change <id> <addLearner|promote|remove> <node>
 *   read-index <id> <request> | transfer-leadership <from> <to> | compact <id>
 *   process-ready [id...]                  handle Readys, printing them
 *   deliver-msgs [id...] [type=T] [drop]   deliver (or drop) queued messages to these nodes, once
 *   stabilize [quiet]                      process Readys and deliver until quiet, printing it all
 *   partition <ids> | <ids> [| ...]  /  heal  /  crash <id>  /  restart <id>
 *   status [id...]  /  raft-log <id>
 *
 * The expected output is the spec: REWRITE=1 regenerates it, and it must be read and
 * checked by hand before it is accepted.
 */
import { decodeConfigEntry } from '../src/index.js';
import type { Entry, Message, NodeId, Ready, RaftStatus } from '../src/index.js';
import { TestCluster, entriesWithTerms } from './cluster.js';
import type { OptionsOverride } from './cluster.js';

export interface ScenarioCase {
  /** Comment and blank lines before the command, verbatim. */
  readonly preamble: string[];
  readonly command: string;
  readonly expected: string[];
  /** 1-based line number of the command. */
  readonly line: number;
}

export function parseScenario(text: string): ScenarioCase[] {
  const lines = text.split('\n');
  const cases: ScenarioCase[] = [];
  let preamble: string[] = [];
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    if (line.trim() === '' || line.startsWith('#')) {
      preamble.push(line);
      continue;
    }
    if (lines[i + 1] !== '----') throw new Error(`line ${i + 2}: expected ---- after the command "${line}"`);
    const expected: string[] = [];
    let j = i + 2;
    for (; j < lines.length && lines[j]!.trim() !== ''; j++) expected.push(lines[j]!);
    cases.push({ preamble, command: line, expected, line: i + 1 });
    preamble = [];
    i = j - 1;
  }
  return cases;
}

export function formatScenario(cases: readonly ScenarioCase[], outputs: readonly string[][]): string {
  const parts: string[] = [];
  cases.forEach((c, i) => {
    const preamble = c.preamble.filter((line, k) => !(k === 0 && line.trim() === '' && i > 0));
    parts.push(...preamble, c.command, '----', ...(outputs[i] ?? c.expected), '');
  });
  return parts.join('\n');
}

// ---------------------------------------------------------------- formatting

function formatEntry(e: Entry): string {
  if (e.type === 'config') {
    const { change } = decodeConfigEntry(e.data);
    return `${e.index}@${e.term} conf(${change.type} ${change.nodeId})`;
  }
  return e.data.byteLength === 0 ? `${e.index}@${e.term} noop` : `${e.index}@${e.term} ${JSON.stringify(new TextDecoder().decode(e.data))}`;
}

function formatEntries(entries: readonly Entry[]): string {
  if (entries.length <= 3) return `[${entries.map(formatEntry).join(', ')}]`;
  return `[${formatEntry(entries[0]!)}, ... ${formatEntry(entries.at(-1)!)}] (${entries.length} entries)`;
}

export function formatMessage(m: Message): string {
  const head = `${m.from}->${m.to} ${m.type} term=${m.term}`;
  switch (m.type) {
    case 'preVote':
      return `${head} last=${m.lastLogIndex}@${m.lastLogTerm}`;
    case 'vote':
      return `${head} last=${m.lastLogIndex}@${m.lastLogTerm}${m.leaderTransfer ? ' transfer' : ''}`;
    case 'preVoteResp':
    case 'voteResp':
      return `${head} ${m.reject ? 'rejected' : 'granted'}`;
    case 'append':
      return `${head} prev=${m.prevLogIndex}@${m.prevLogTerm} commit=${m.commit} entries=${formatEntries(m.entries)}`;
    case 'appendResp':
      return m.reject ? `${head} rejected index=${m.index} hint=${m.hintIndex}@${m.hintTerm}` : `${head} ok index=${m.index}`;
    case 'heartbeat':
      return `${head} commit=${m.commit}${m.readSeq > 0 ? ` readSeq=${m.readSeq}` : ''}`;
    case 'heartbeatResp':
      return `${head}${m.readSeq > 0 ? ` readSeq=${m.readSeq}` : ''}`;
    case 'snapshot':
      return `${head} snap=${m.meta.index}@${m.meta.term} bytes=${m.offset}..${m.offset + m.chunk.byteLength}/${m.totalBytes}${m.done ? ' done' : ''}`;
    case 'snapshotResp':
      return `${head} snap=${m.snapshotIndex} next=${m.nextOffset}${m.reject ? ' rejected' : ''}`;
    case 'timeoutNow':
      return head;
  }
}

function formatReady(id: NodeId, ready: Ready, out: string[]): void {
  out.push(`> ${id} ready`);
  if (ready.softState !== null) out.push(`  state: ${ready.softState.role} leader=${ready.softState.leaderId ?? '-'}`);
  if (ready.hardState !== null) {
    const h = ready.hardState;
    out.push(`  hard: term=${h.term} vote=${h.vote ?? '-'} commit=${h.commit}`);
  }
  if (ready.snapshot !== null) {
    const meta = ready.snapshot.meta;
    out.push(`  snapshot: ${meta.index}@${meta.term} voters=${meta.config.voters.join(',')} learners=${meta.config.learners.join(',') || '-'}`);
  }
  if (ready.entries.length > 0) out.push(`  entries: ${formatEntries(ready.entries)}`);
  if (ready.committedEntries.length > 0) out.push(`  apply: ${formatEntries(ready.committedEntries)}`);
  for (const r of ready.readStates) out.push(`  read: ${r.requestId} index=${r.index}`);
  for (const m of ready.messages) out.push(`  send: ${formatMessage(m)}`);
}

function formatStatus(s: RaftStatus, withProgress: boolean): string[] {
  const config = `voters=${s.config.voters.join(',')}${s.config.learners.length > 0 ? ` learners=${s.config.learners.join(',')}` : ''}`;
  const lines = [
    `${s.id}: ${s.role} term=${s.term} vote=${s.vote ?? '-'} leader=${s.leaderId ?? '-'} commit=${s.commitIndex} applied=${s.appliedIndex} ` +
      `log=${s.firstIndex}..${s.lastIndex}@${s.lastTerm} ${config}`,
  ];
  if (withProgress && s.role === 'leader') {
    for (const [id, pr] of s.progress) {
      if (id !== s.id) lines.push(`  ${id}: ${pr.state} match=${pr.match} next=${pr.next}${pr.inflight > 0 ? ` inflight=${pr.inflight}` : ''}`);
    }
  }
  if (s.leadTransferee !== null) lines.push(`  transferring to ${s.leadTransferee}`);
  return lines;
}

// ---------------------------------------------------------------- interpreter

function parseBool(value: string): boolean {
  if (value !== 'true' && value !== 'false') throw new Error(`not a boolean: ${value}`);
  return value === 'true';
}

const OPTION_KEYS: Record<string, (o: Record<string, unknown>, v: string) => void> = {
  'pre-vote': (o, v) => (o['preVote'] = parseBool(v)),
  'check-quorum': (o, v) => (o['checkQuorum'] = parseBool(v)),
  election: (o, v) => (o['electionTicks'] = Number(v)),
  heartbeat: (o, v) => (o['heartbeatTicks'] = Number(v)),
  'max-entries': (o, v) => (o['appendEntriesMax'] = Number(v)),
  'max-bytes': (o, v) => (o['appendBytesMax'] = Number(v)),
  inflight: (o, v) => (o['inflightAppendsMax'] = Number(v)),
  chunk: (o, v) => (o['snapshotChunkBytes'] = Number(v)),
  retain: (o, v) => (o['retainedEntriesAfterSnapshot'] = Number(v)),
  'promote-learners': (o, v) => (o['promoteLearners'] = parseBool(v)),
};

export class ScenarioRunner {
  private cluster: TestCluster | null = null;
  /** Output of the command being run. */
  private out: string[] = [];

  get c(): TestCluster {
    if (this.cluster === null) throw new Error('no nodes: use add-nodes first');
    return this.cluster;
  }

  run(command: string): string[] {
    this.out = [];
    const [name, ...args] = command.trim().split(/\s+/);
    const handler = this.commands[name!];
    if (handler === undefined) throw new Error(`unknown command: ${name}`);
    handler(args);
    // The safety checker runs throughout: a script never passes with a violation.
    if (this.cluster !== null && this.cluster.checker.violations.length > 0) {
      this.out.push(...this.cluster.checker.violations.map((v) => `VIOLATION ${v}`));
      this.cluster.checker.violations.length = 0;
    }
    return this.out.length > 0 ? this.out : ['ok'];
  }

  private roles(): Map<NodeId, string> {
    const roles = new Map<NodeId, string>();
    for (const node of this.c.liveNodes()) {
      const s = node.raft.status();
      roles.set(node.id, `${s.role} term=${s.term}`);
    }
    return roles;
  }

  /** Prints role/term changes between two snapshots of roles(). */
  private printTransitions(before: Map<NodeId, string>): void {
    for (const [id, now] of this.roles()) {
      const was = before.get(id);
      if (was !== undefined && was !== now) this.out.push(`${id}: ${was} -> ${now}`);
    }
  }

  private processReady(ids: readonly NodeId[] | null): void {
    let progressed = true;
    while (progressed) {
      progressed = false;
      for (const node of this.c.nodes.values()) {
        if (ids !== null && !ids.includes(node.id)) continue;
        if (this.c.processNode(node) !== null) progressed = true;
      }
    }
  }

  private stabilize(quiet: boolean): void {
    const c = this.c;
    const before = this.roles();
    const saved = this.out;
    if (quiet) this.out = [];
    for (let round = 0; ; round++) {
      if (round > 1000) throw new Error('did not stabilize');
      this.processReady(null);
      if (c.queue.length === 0) break;
      this.out.push('> deliver');
      const batch = c.queue;
      c.queue = [];
      for (const m of batch) c.deliver(m);
    }
    c.checkLogMatching();
    if (quiet) {
      this.out = saved;
      this.printTransitions(before);
      for (const node of c.liveNodes()) {
        const s = node.raft.status();
        this.out.push(`${node.id}: ${s.role} term=${s.term} commit=${s.commitIndex} last=${s.lastIndex}`);
      }
    }
  }

  private readonly commands: Record<string, (args: string[]) => void> = {
    'add-nodes': (args) => {
      const count = Number(args[0]);
      const overrides: Record<string, unknown> = {};
      let seed = 1;
      for (const arg of args.slice(1)) {
        const [key, value] = arg.split('=');
        if (key === 'seed') seed = Number(value);
        else if (key !== undefined && value !== undefined && OPTION_KEYS[key] !== undefined) OPTION_KEYS[key](overrides, value);
        else throw new Error(`unknown option ${arg}`);
      }
      if (this.cluster === null) {
        const ids = Array.from({ length: count }, (_, i) => String(i + 1));
        this.cluster = new TestCluster(ids, overrides as OptionsOverride, seed);
        this.cluster.onReady = (id, ready) => formatReady(id, ready, this.out);
        this.cluster.onDeliver = (m, dropped) => this.out.push(`  ${formatMessage(m)}${dropped ? ' DROPPED' : ''}`);
        this.out.push(`added ${ids.join(' ')}`);
      } else {
        const first = this.c.nodes.size + 1;
        const ids = Array.from({ length: count }, (_, i) => String(first + i));
        for (const id of ids) this.c.addNode(id);
        this.out.push(`added ${ids.join(' ')} (joining)`);
      }
    },
    'set-log': ([id, ...spec]) => {
      const terms = spec.flatMap((part) => {
        const [term, count] = part.split('*');
        return Array<number>(Number(count ?? 1)).fill(Number(term));
      });
      const term = Math.max(0, ...terms);
      this.c.setDurable(id!, { hardState: { term, vote: null, commit: 0 }, snapshot: null, entries: entriesWithTerms(terms) });
      this.out.push(...formatStatus(this.c.raft(id!).status(), false));
    },
    campaign: ([id]) => {
      const saved = this.out;
      this.out = [];
      const before = this.roles();
      this.c.campaign(id!);
      const readies = this.out;
      this.out = saved;
      this.printTransitions(before);
      this.out.push(...readies);
    },
    elect: ([id]) => {
      const saved = this.out;
      this.c.elect(id!);
      this.out = saved;
      const s = this.c.raft(id!).status();
      this.out = [`${id} is leader in term ${s.term}`];
    },
    tick: ([id, times]) => {
      const before = this.roles();
      this.c.tick(id!, Number(times ?? 1));
      this.printTransitions(before);
    },
    'tick-all': ([times]) => {
      const before = this.roles();
      this.c.tickAll(Number(times ?? 1));
      this.printTransitions(before);
    },
    run: ([times]) => {
      const saved = this.out;
      const transitions: string[] = [];
      for (let i = 1; i <= Number(times ?? 1); i++) {
        const before = this.roles();
        this.c.tickAll();
        this.out = [];
        this.stabilize(false);
        this.out = [];
        this.printTransitions(before);
        transitions.push(...this.out.map((line) => `tick ${i}: ${line}`));
      }
      this.out = saved;
      this.out.push(...transitions);
      for (const node of this.c.liveNodes()) {
        const s = node.raft.status();
        this.out.push(`${node.id}: ${s.role} term=${s.term} leader=${s.leaderId ?? '-'} commit=${s.commitIndex} last=${s.lastIndex}`);
      }
    },
    propose: ([id, ...data]) => {
      const result = this.c.raft(id!).propose(new TextEncoder().encode(data.join(' ')));
      this.out.push(result.ok ? `ok index=${result.index} term=${result.term}` : `rejected: ${result.reason} (leader ${result.leaderId ?? '-'})`);
    },
    'propose-conf-change': ([id, type, nodeId]) => {
      if (type !== 'addLearner' && type !== 'promote' && type !== 'remove') throw new Error(`unknown change ${type}`);
      const result = this.c.raft(id!).proposeConfChange({ type, nodeId: nodeId! });
      this.out.push(result.ok ? `ok index=${result.index} term=${result.term}` : `rejected: ${result.reason} (leader ${result.leaderId ?? '-'})`);
    },
    'read-index': ([id, request]) => {
      const result = this.c.raft(id!).readIndex(request!);
      this.out.push(result.ok ? 'ok' : `rejected: ${result.reason} (leader ${result.leaderId ?? '-'})`);
    },
    'transfer-leadership': ([from, to]) => {
      const result = this.c.raft(from!).transferLeadership(to!);
      this.out.push(result.ok ? 'ok' : `rejected: ${result.reason} (leader ${result.leaderId ?? '-'})`);
    },
    compact: ([id]) => {
      const snapshot = this.c.snapshot(id!);
      const s = this.c.raft(id!).status();
      this.out.push(`snapshot ${snapshot.meta.index}@${snapshot.meta.term} (${snapshot.data.byteLength} bytes), log=${s.firstIndex}..${s.lastIndex}`);
    },
    'process-ready': (ids) => this.processReady(ids.length > 0 ? ids : null),
    'deliver-msgs': (args) => {
      const drop = args.includes('drop');
      const type = args.find((a) => a.startsWith('type='))?.slice(5);
      const to = args.filter((a) => a !== 'drop' && !a.startsWith('type='));
      const matches = (m: Message): boolean => (to.length === 0 || to.includes(m.to)) && (type === undefined || m.type === type);
      const batch = this.c.queue.filter(matches);
      this.c.queue = this.c.queue.filter((m) => !matches(m));
      for (const m of batch) {
        if (drop) this.out.push(`  ${formatMessage(m)} DROPPED`);
        else this.c.deliver(m);
      }
    },
    stabilize: (args) => this.stabilize(args.includes('quiet')),
    partition: (args) => {
      const groups = args.join(' ').split('|').map((g) => g.trim().split(/\s+/).filter((id) => id !== ''));
      this.c.partition(...groups);
    },
    heal: () => this.c.heal(),
    crash: ([id]) => this.c.crash(id!),
    restart: ([id]) => {
      this.c.restart(id!);
      this.out.push(...formatStatus(this.c.raft(id!).status(), false));
    },
    status: (ids) => {
      const nodes = ids.length > 0 ? ids.map((id) => this.c.node(id)) : [...this.c.nodes.values()];
      for (const node of nodes) {
        if (node.crashed) this.out.push(`${node.id}: crashed`);
        else this.out.push(...formatStatus(node.raft.status(), true));
      }
    },
    'raft-log': ([id]) => {
      const raft = this.c.raft(id!);
      const s = raft.status();
      const snapshot = this.c.node(id!).durable.snapshot;
      if (snapshot !== null) this.out.push(`snapshot ${snapshot.meta.index}@${snapshot.meta.term}`);
      for (let i = s.firstIndex; i <= s.lastIndex; i++) this.out.push(formatEntry(raft.entryAt(i)!));
      if (s.firstIndex > s.lastIndex && snapshot === null) this.out.push('(empty)');
    },
  };
}

/** Runs a script; returns the actual outputs, one per case. */
export function runScenario(cases: readonly ScenarioCase[]): string[][] {
  const runner = new ScenarioRunner();
  return cases.map((c) => {
    try {
      return runner.run(c.command);
    } catch (error) {
      return [`error: ${(error as Error).message}`];
    }
  });
}
