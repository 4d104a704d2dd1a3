/**
 * A small synchronous test cluster for the Raft core: in-memory "durable" storage per
 * node, a message queue, partitions, crashes and restarts. Every Ready is persisted
 * before its messages are queued, as the real driver does.
 *
 * Every tick, step and advance is fed to a SafetyChecker (see safety.ts); tests assert
 * `cluster.checker.violations` is empty (or, with a planted bug, that it is not).
 */
import { RaftNode, createRandom } from '../src/index.js';
import type { Entry, HardState, Message, NodeId, RaftOptions, ReadState, Ready, RecoveryMark, Snapshot } from '../src/index.js';
import { SafetyChecker } from './safety.js';

export interface DurableState {
  hardState: HardState;
  snapshot: Snapshot | null;
  entries: Entry[];
}

export interface TestNode {
  readonly id: NodeId;
  raft: RaftNode;
  durable: DurableState;
  applied: Entry[];
  readStates: ReadState[];
  /** The state machine: data of applied normal entries, as strings. */
  machine: string[];
  crashed: boolean;
  /** The voters a brand-new node starts with (empty for a node joining an existing group). */
  readonly initialVoters: readonly NodeId[];
}

export type OptionsOverride = Partial<Omit<RaftOptions, 'id' | 'random'>>;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

export class TestCluster {
  readonly nodes = new Map<NodeId, TestNode>();
  queue: Message[] = [];
  /** Directed links that drop everything: "a->b". */
  private readonly cut = new Set<string>();
  /** Messages types dropped everywhere (e.g. to stall appends). */
  dropTypes = new Set<Message['type']>();
  /** Called for each message that would be delivered; returning false drops it. */
  filter: ((message: Message) => boolean) | null = null;
  delivered: Message[] = [];
  readonly checker: SafetyChecker;
  /** Tracing hooks, used by the scenario interpreter. */
  onReady: ((id: NodeId, ready: Ready) => void) | null = null;
  onDeliver: ((message: Message, dropped: boolean) => void) | null = null;

  constructor(
    ids: readonly NodeId[],
    readonly overrides: OptionsOverride = {},
    private readonly seed = 1,
    voters: readonly NodeId[] = ids,
  ) {
    this.checker = new SafetyChecker((id) => {
      const node = this.nodes.get(id);
      return node === undefined || node.crashed ? undefined : node.raft;
    });
    for (const id of ids) this.createNode(id, voters);
  }

  get electionTicks(): number {
    return this.overrides.electionTicks ?? 10;
  }

  private createNode(id: NodeId, initialVoters: readonly NodeId[]): TestNode {
    const durable: DurableState = { hardState: { term: 0, vote: null, commit: 0 }, snapshot: null, entries: [] };
    const node: TestNode = {
      id,
      raft: this.makeRaft(id, durable, initialVoters),
      durable,
      applied: [],
      readStates: [],
      machine: [],
      crashed: false,
      initialVoters,
    };
    this.nodes.set(id, node);
    return node;
  }

  /** Adds a brand-new node that knows no configuration: it joins once a leader adds it. */
  addNode(id: NodeId): TestNode {
    if (this.nodes.has(id)) throw new Error(`node ${id} exists`);
    return this.createNode(id, []);
  }

  private makeRaft(id: NodeId, durable: DurableState, voters: readonly NodeId[], recovering: RecoveryMark | null = null): RaftNode {
    let seed = this.seed;
    for (const ch of id) seed = (seed * 31 + ch.charCodeAt(0)) >>> 0;
    return new RaftNode(
      { id, random: createRandom(seed), initialConfig: { voters: [...voters], learners: [] }, ...this.overrides },
      { hardState: durable.hardState, snapshot: durable.snapshot, entries: [...durable.entries], recovering },
    );
  }

  node(id: NodeId): TestNode {
    const node = this.nodes.get(id);
    if (node === undefined) throw new Error(`no node ${id}`);
    return node;
  }

  raft(id: NodeId): RaftNode {
    return this.node(id).raft;
  }

  ids(): NodeId[] {
    return [...this.nodes.keys()];
  }

  liveNodes(): TestNode[] {
    return [...this.nodes.values()].filter((n) => !n.crashed);
  }

  /** Handles one Ready of one node, if it has one. Returns it. */
  processNode(node: TestNode): Ready | null {
    if (node.crashed || !node.raft.hasReady()) return null;
    const ready = node.raft.ready();
    this.onReady?.(node.id, ready);
    if (ready.snapshot !== null) {
      // A snapshot in a Ready was installed from the leader: it replaces the whole log.
      node.durable.snapshot = ready.snapshot;
      node.durable.entries = [];
      node.machine = decodeMachine(ready.snapshot.data);
    }
    if (ready.entries.length > 0) {
      const first = ready.entries[0]!.index;
      node.durable.entries = node.durable.entries.filter((e) => e.index < first).concat(ready.entries);
    }
    if (ready.hardState !== null) node.durable.hardState = ready.hardState;
    this.queue.push(...ready.messages);
    for (const entry of ready.committedEntries) {
      node.applied.push(entry);
      this.checker.onApply(node.id, entry);
      if (entry.type === 'normal' && entry.data.byteLength > 0) node.machine.push(decoder.decode(entry.data));
    }
    node.readStates.push(...ready.readStates);
    node.raft.advance();
    this.checker.observe(node.raft);
    return ready;
  }

  /** Persists, sends and applies every pending Ready of every live node. */
  processReady(): void {
    let progressed = true;
    while (progressed) {
      progressed = false;
      for (const node of this.nodes.values()) {
        if (this.processNode(node) !== null) progressed = true;
      }
    }
  }

  /** Processes Readys, then delivers the messages queued so far (not the ones they cause). */
  deliverRound(): number {
    this.processReady();
    const batch = this.queue;
    this.queue = [];
    for (const message of batch) this.deliver(message);
    return batch.length;
  }

  /** Delivers queued messages (and the ones they cause) until the network is quiet. */
  stabilize(maxRounds = 1000): void {
    for (let round = 0; round < maxRounds; round++) {
      this.processReady();
      if (this.queue.length === 0) {
        this.checkLogMatching();
        return;
      }
      const batch = this.queue;
      this.queue = [];
      for (const message of batch) this.deliver(message);
    }
    throw new Error('cluster did not stabilize');
  }

  /** Whether `message` would be dropped by the network (partition, crash, filters). */
  private dropped(message: Message): boolean {
    const target = this.nodes.get(message.to);
    if (target === undefined || target.crashed) return true;
    if (this.nodes.get(message.from)?.crashed === true) return true;
    if (this.cut.has(`${message.from}->${message.to}`) || this.dropTypes.has(message.type)) return true;
    return this.filter !== null && !this.filter(message);
  }

  /** Delivers one message unless the network drops it. Returns whether it was delivered. */
  deliver(message: Message): boolean {
    const dropped = this.dropped(message);
    this.onDeliver?.(message, dropped);
    if (dropped) return false;
    const target = this.node(message.to);
    this.delivered.push(message);
    target.raft.step(message);
    this.checker.observe(target.raft);
    return true;
  }

  tick(id: NodeId, times = 1): void {
    const node = this.node(id);
    for (let i = 0; i < times; i++) {
      node.raft.tick();
      this.checker.observe(node.raft);
    }
  }

  tickAll(times = 1): void {
    for (let i = 0; i < times; i++) {
      for (const node of this.nodes.values()) {
        if (node.crashed) continue;
        node.raft.tick();
        this.checker.observe(node.raft);
      }
    }
  }

  /** Ticks and stabilizes everyone until some node leads (or gives up). Returns the leader. */
  runUntilLeader(maxTicks = 200): NodeId {
    for (let i = 0; i < maxTicks; i++) {
      const leader = this.leader();
      if (leader !== null) return leader;
      this.tickAll();
      this.stabilize();
    }
    throw new Error('no leader emerged');
  }

  /** Ticks every node until `id` campaigns, then stabilizes. */
  elect(id: NodeId): void {
    const raft = this.raft(id);
    for (let i = 0; i < 100 && this.raft(id).status().role !== 'leader'; i++) {
      this.tick(id);
      this.stabilize();
    }
    if (this.raft(id).status().role !== 'leader') throw new Error(`${id} did not become leader (raft ${raft.id})`);
  }

  /**
   * Ticks only `id` until its election timer fires (it sends (pre-)vote requests or wins
   * alone), processing its Readys so the requests are queued but not delivered. Returns the
   * number of ticks it took.
   */
  campaign(id: NodeId): number {
    const node = this.node(id);
    const before = node.raft.status();
    for (let i = 1; i <= 3 * this.electionTicks; i++) {
      this.tick(id);
      const ready = this.processNode(node);
      const status = node.raft.status();
      if (status.role !== before.role || status.term !== before.term) return i;
      if (ready?.messages.some((m) => m.type === 'vote' || m.type === 'preVote') === true) return i;
    }
    throw new Error(`${id} did not campaign`);
  }

  propose(id: NodeId, text: string): number {
    const result = this.raft(id).propose(encoder.encode(text));
    if (!result.ok) throw new Error(`proposal rejected: ${result.reason}`);
    return result.index;
  }

  isolate(id: NodeId): void {
    for (const other of this.nodes.keys()) {
      if (other === id) continue;
      this.cut.add(`${id}->${other}`);
      this.cut.add(`${other}->${id}`);
    }
  }

  cutLink(from: NodeId, to: NodeId): void {
    this.cut.add(`${from}->${to}`);
  }

  /** Splits the cluster into groups that cannot reach each other. */
  partition(...groups: NodeId[][]): void {
    this.heal();
    for (const a of groups) for (const b of groups) {
      if (a === b) continue;
      for (const x of a) for (const y of b) this.cut.add(`${x}->${y}`);
    }
  }

  heal(): void {
    this.cut.clear();
  }

  /** Crashes a node: everything not persisted through a Ready is lost. */
  crash(id: NodeId): void {
    this.node(id).crashed = true;
    this.checker.forget(id);
    this.queue = this.queue.filter((m) => m.to !== id && m.from !== id);
  }

  /**
   * Restarts a crashed node as its storage repair would after damage: the durable state is
   * replaced by `repaired` (what survived) and the replica recovers until `mark.term`.
   */
  restartRepaired(id: NodeId, repaired: DurableState, mark: RecoveryMark): void {
    const node = this.node(id);
    node.durable = repaired;
    node.raft = this.makeRaft(id, node.durable, node.initialVoters, mark);
    node.crashed = false;
    node.applied = [];
    node.readStates = [];
    node.machine = node.durable.snapshot === null ? [] : decodeMachine(node.durable.snapshot.data);
    this.checker.observe(node.raft);
  }

  restart(id: NodeId): void {
    const node = this.node(id);
    node.raft = this.makeRaft(id, node.durable, node.initialVoters);
    node.crashed = false;
    node.applied = [];
    node.readStates = [];
    node.machine = node.durable.snapshot === null ? [] : decodeMachine(node.durable.snapshot.data);
    this.checker.observe(node.raft);
  }

  /** Replaces a node's durable state (e.g. to give it a crafted log) and restarts it. */
  setDurable(id: NodeId, durable: DurableState): void {
    const node = this.node(id);
    node.durable = durable;
    this.restart(id);
  }

  leader(): NodeId | null {
    for (const node of this.nodes.values()) if (!node.crashed && node.raft.status().role === 'leader') return node.id;
    return null;
  }

  /** Takes a snapshot of node's machine at its applied index and compacts. */
  snapshot(id: NodeId): Snapshot {
    const snapshot = this.trySnapshot(id);
    if (snapshot === null) throw new Error(`${id} already has a snapshot at or after its applied index`);
    return snapshot;
  }

  /** Like snapshot(), but returns null when the node has nothing new to snapshot. */
  trySnapshot(id: NodeId): Snapshot | null {
    const node = this.node(id);
    const snapshot = node.raft.compact(node.raft.status().appliedIndex, encodeMachine(node.machine));
    if (snapshot === null) return null;
    node.durable.snapshot = snapshot;
    node.durable.entries = node.durable.entries.filter((e) => e.index > snapshot.meta.index);
    return snapshot;
  }

  checkLogMatching(): void {
    this.checker.checkLogMatching(this.liveNodes().map((n) => n.raft));
  }

  /** Asserts (throws) that no safety property was violated. */
  assertSafe(): void {
    this.checkLogMatching();
    if (this.checker.violations.length > 0) throw new Error(`safety violated:\n${this.checker.violations.join('\n')}`);
  }
}

export function encodeMachine(machine: readonly string[]): Uint8Array {
  return encoder.encode(JSON.stringify(machine));
}

export function decodeMachine(data: Uint8Array): string[] {
  return data.byteLength === 0 ? [] : (JSON.parse(decoder.decode(data)) as string[]);
}

export function text(data: Uint8Array): string {
  return decoder.decode(data);
}

/** Builds log entries from a compact spec: terms[i] is the term of entry i+1. */
export function entriesWithTerms(terms: readonly number[], startIndex = 1, prefix = 'e'): Entry[] {
  return terms.map((term, i) => ({
    index: startIndex + i,
    term,
    type: 'normal' as const,
    data: encoder.encode(`${prefix}${startIndex + i}@${term}`),
  }));
}
