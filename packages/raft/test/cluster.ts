/**
 * A small synchronous test cluster for the Raft core: in-memory "durable" storage per
 * node, a message queue, partitions, crashes and restarts. Every Ready is persisted
 * before its messages are queued, as the real driver does.
 */
import { RaftNode, createRandom } from '../src/index.js';
import type { Entry, HardState, Message, NodeId, RaftOptions, ReadState, Snapshot } from '../src/index.js';

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
}

export type OptionsOverride = Partial<Omit<RaftOptions, 'id' | 'random'>>;

export class TestCluster {
  readonly nodes = new Map<NodeId, TestNode>();
  queue: Message[] = [];
  /** Directed links that drop everything: "a->b". */
  private readonly cut = new Set<string>();
  /** Messages types dropped everywhere (e.g. to stall appends). */
  dropTypes = new Set<Message['type']>();
  delivered: Message[] = [];

  constructor(
    ids: readonly NodeId[],
    private readonly overrides: OptionsOverride = {},
    private readonly seed = 1,
    voters: readonly NodeId[] = ids,
  ) {
    for (const id of ids) {
      const durable: DurableState = { hardState: { term: 0, vote: null, commit: 0 }, snapshot: null, entries: [] };
      this.nodes.set(id, { id, raft: this.makeRaft(id, durable, voters), durable, applied: [], readStates: [], machine: [], crashed: false });
    }
  }

  private makeRaft(id: NodeId, durable: DurableState, voters: readonly NodeId[]): RaftNode {
    let seed = this.seed;
    for (const ch of id) seed = (seed * 31 + ch.charCodeAt(0)) >>> 0;
    return new RaftNode(
      { id, random: createRandom(seed), initialConfig: { voters: [...voters], learners: [] }, ...this.overrides },
      { hardState: durable.hardState, snapshot: durable.snapshot, entries: [...durable.entries] },
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

  /** Persists, sends and applies every pending Ready of every live node. */
  processReady(): void {
    let progressed = true;
    while (progressed) {
      progressed = false;
      for (const node of this.nodes.values()) {
        if (node.crashed || !node.raft.hasReady()) continue;
        progressed = true;
        const ready = node.raft.ready();
        if (ready.snapshot !== null) {
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
          if (entry.type === 'normal' && entry.data.byteLength > 0) node.machine.push(new TextDecoder().decode(entry.data));
        }
        node.readStates.push(...ready.readStates);
        node.raft.advance();
      }
    }
  }

  /** Delivers queued messages (and the ones they cause) until the network is quiet. */
  stabilize(maxRounds = 1000): void {
    for (let round = 0; round < maxRounds; round++) {
      this.processReady();
      if (this.queue.length === 0) return;
      const batch = this.queue;
      this.queue = [];
      for (const message of batch) this.deliver(message);
    }
    throw new Error('cluster did not stabilize');
  }

  deliver(message: Message): void {
    const target = this.nodes.get(message.to);
    if (target === undefined || target.crashed) return;
    if (this.nodes.get(message.from)?.crashed === true) return;
    if (this.cut.has(`${message.from}->${message.to}`) || this.dropTypes.has(message.type)) return;
    this.delivered.push(message);
    target.raft.step(message);
  }

  tick(id: NodeId, times = 1): void {
    for (let i = 0; i < times; i++) this.raft(id).tick();
  }

  tickAll(times = 1): void {
    for (let i = 0; i < times; i++) for (const node of this.nodes.values()) if (!node.crashed) node.raft.tick();
  }

  /** Ticks every node until `id` campaigns, then stabilizes. */
  elect(id: NodeId): void {
    const raft = this.raft(id);
    for (let i = 0; i < 100 && raft.status().role !== 'leader'; i++) {
      raft.tick();
      this.stabilize();
    }
    if (raft.status().role !== 'leader') throw new Error(`${id} did not become leader`);
  }

  propose(id: NodeId, text: string): number {
    const result = this.raft(id).propose(new TextEncoder().encode(text));
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
    this.queue = this.queue.filter((m) => m.to !== id && m.from !== id);
  }

  restart(id: NodeId): void {
    const node = this.node(id);
    node.raft = this.makeRaft(id, node.durable, []);
    node.crashed = false;
    node.applied = [];
    node.machine = node.durable.snapshot === null ? [] : decodeMachine(node.durable.snapshot.data);
  }

  leader(): NodeId | null {
    for (const node of this.nodes.values()) if (!node.crashed && node.raft.status().role === 'leader') return node.id;
    return null;
  }

  /** Takes a snapshot of node's machine at its applied index and compacts. */
  snapshot(id: NodeId): Snapshot {
    const node = this.node(id);
    const snapshot = node.raft.compact(node.raft.status().appliedIndex, encodeMachine(node.machine));
    node.durable.snapshot = snapshot;
    node.durable.entries = node.durable.entries.filter((e) => e.index > snapshot.meta.index);
    return snapshot;
  }
}

export function encodeMachine(machine: readonly string[]): Uint8Array {
  return new TextEncoder().encode(JSON.stringify(machine));
}

export function decodeMachine(data: Uint8Array): string[] {
  return data.byteLength === 0 ? [] : (JSON.parse(new TextDecoder().decode(data)) as string[]);
}
