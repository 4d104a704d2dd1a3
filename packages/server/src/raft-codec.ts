/**
 * The Raft core's messages on the wire (proto/quorumq/v1/raft.proto), one RaftBatch per
 * peer per event-loop turn.
 */
import { quorumq } from '@quorumq/proto';
import type { ClusterConfig, Entry, Message, SnapshotMeta } from '@quorumq/raft';

import pb = quorumq.v1;

export interface GroupMessage {
  readonly groupId: string;
  readonly message: Message;
}

const EMPTY = new Uint8Array(0);

function entryToWire(entry: Entry): pb.Entry.$Properties {
  return {
    index: entry.index,
    term: entry.term,
    type: entry.type === 'config' ? pb.EntryType.ENTRY_TYPE_CONFIG : pb.EntryType.ENTRY_TYPE_NORMAL,
    data: entry.data,
  };
}

function entryFromWire(entry: pb.Entry.$Properties): Entry {
  return {
    index: entry.index ?? 0,
    term: entry.term ?? 0,
    type: entry.type === pb.EntryType.ENTRY_TYPE_CONFIG ? 'config' : 'normal',
    data: entry.data ?? EMPTY,
  };
}

function configFromWire(config: pb.ClusterConfig.$Properties | null | undefined): ClusterConfig {
  return { voters: [...(config?.voters ?? [])], learners: [...(config?.learners ?? [])] };
}

function metaFromWire(meta: pb.SnapshotMeta.$Properties | null | undefined): SnapshotMeta {
  return { index: meta?.index ?? 0, term: meta?.term ?? 0, config: configFromWire(meta?.config) };
}

export function messageToWire(groupId: string, message: Message): pb.RaftMessage.$Properties {
  const envelope = { groupId, from: message.from, to: message.to, term: message.term };
  switch (message.type) {
    case 'preVote':
      return { ...envelope, preVote: { lastLogIndex: message.lastLogIndex, lastLogTerm: message.lastLogTerm } };
    case 'preVoteResp':
      return { ...envelope, preVoteResponse: { reject: message.reject } };
    case 'vote':
      return {
        ...envelope,
        vote: { lastLogIndex: message.lastLogIndex, lastLogTerm: message.lastLogTerm, leaderTransfer: message.leaderTransfer },
      };
    case 'voteResp':
      return { ...envelope, voteResponse: { reject: message.reject } };
    case 'append':
      return {
        ...envelope,
        append: {
          prevLogIndex: message.prevLogIndex,
          prevLogTerm: message.prevLogTerm,
          entries: message.entries.map(entryToWire),
          commit: message.commit,
        },
      };
    case 'appendResp':
      return {
        ...envelope,
        appendResponse: { reject: message.reject, index: message.index, hintIndex: message.hintIndex, hintTerm: message.hintTerm },
      };
    case 'heartbeat':
      return { ...envelope, heartbeat: { commit: message.commit, readSeq: message.readSeq } };
    case 'heartbeatResp':
      return { ...envelope, heartbeatResponse: { readSeq: message.readSeq } };
    case 'snapshot':
      return {
        ...envelope,
        snapshot: {
          meta: {
            index: message.meta.index,
            term: message.meta.term,
            config: { voters: [...message.meta.config.voters], learners: [...message.meta.config.learners] },
          },
          offset: message.offset,
          totalBytes: message.totalBytes,
          chunk: message.chunk,
          done: message.done,
        },
      };
    case 'snapshotResp':
      return {
        ...envelope,
        snapshotResponse: { snapshotIndex: message.snapshotIndex, nextOffset: message.nextOffset, reject: message.reject },
      };
    case 'timeoutNow':
      return { ...envelope, timeoutNow: {} };
  }
}

/** Decodes one wire message; null for a message of a kind this node does not know. */
export function messageFromWire(wire: pb.RaftMessage): GroupMessage | null {
  const envelope = { from: wire.from, to: wire.to, term: wire.term };
  const groupId = wire.groupId;
  const m = (message: Message): GroupMessage => ({ groupId, message });
  switch (wire.body) {
    case 'preVote':
      return m({ ...envelope, type: 'preVote', lastLogIndex: wire.preVote?.lastLogIndex ?? 0, lastLogTerm: wire.preVote?.lastLogTerm ?? 0 });
    case 'preVoteResponse':
      return m({ ...envelope, type: 'preVoteResp', reject: wire.preVoteResponse?.reject ?? false });
    case 'vote':
      return m({
        ...envelope,
        type: 'vote',
        lastLogIndex: wire.vote?.lastLogIndex ?? 0,
        lastLogTerm: wire.vote?.lastLogTerm ?? 0,
        leaderTransfer: wire.vote?.leaderTransfer ?? false,
      });
    case 'voteResponse':
      return m({ ...envelope, type: 'voteResp', reject: wire.voteResponse?.reject ?? false });
    case 'append': {
      const a = wire.append;
      return m({
        ...envelope,
        type: 'append',
        prevLogIndex: a?.prevLogIndex ?? 0,
        prevLogTerm: a?.prevLogTerm ?? 0,
        entries: (a?.entries ?? []).map(entryFromWire),
        commit: a?.commit ?? 0,
      });
    }
    case 'appendResponse': {
      const r = wire.appendResponse;
      return m({
        ...envelope,
        type: 'appendResp',
        reject: r?.reject ?? false,
        index: r?.index ?? 0,
        hintIndex: r?.hintIndex ?? 0,
        hintTerm: r?.hintTerm ?? 0,
      });
    }
    case 'heartbeat':
      return m({ ...envelope, type: 'heartbeat', commit: wire.heartbeat?.commit ?? 0, readSeq: wire.heartbeat?.readSeq ?? 0 });
    case 'heartbeatResponse':
      return m({ ...envelope, type: 'heartbeatResp', readSeq: wire.heartbeatResponse?.readSeq ?? 0 });
    case 'snapshot': {
      const s = wire.snapshot;
      return m({
        ...envelope,
        type: 'snapshot',
        meta: metaFromWire(s?.meta),
        offset: s?.offset ?? 0,
        totalBytes: s?.totalBytes ?? 0,
        chunk: s?.chunk ?? EMPTY,
        done: s?.done ?? false,
      });
    }
    case 'snapshotResponse': {
      const r = wire.snapshotResponse;
      return m({
        ...envelope,
        type: 'snapshotResp',
        snapshotIndex: r?.snapshotIndex ?? 0,
        nextOffset: r?.nextOffset ?? 0,
        reject: r?.reject ?? false,
      });
    }
    case 'timeoutNow':
      return m({ ...envelope, type: 'timeoutNow' });
    default:
      return null;
  }
}
