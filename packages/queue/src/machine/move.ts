/**
 * Moving messages (spec 8, DLQ replay), at least once: `moveStart` fixes how many to move
 * (the ready count then, capped by `limit`), so a failing message cannot loop. After every
 * command the machine hands out ready messages, head first, into the `moving` place while
 * fewer than `window` are in flight, each with a `move` effect; a message leaves the queue
 * only when `moveConfirmed` names it (the destination committed it). `moveFailed` puts it
 * back at the tail of its priority level (the count is not given back). A new leader
 * re-issues the `move` effects of the messages still in flight (`leaderEffects`).
 *
 * The move ends (`moveDone`) when nothing is in flight and either all of its count was
 * handed out, it was cancelled, or it needs a message and none is ready.
 */
import { isSuperseded } from './compaction.js';
import { compact, deadLetter, isExpired } from './deadletter.js';
import { takeLiveReady } from './delivery.js';
import { holdForMove, remove, unholdMoving, type MessageHeader, type MoveState, type QueueState } from './state.js';
import type { Effect, MoveStartCommand, Reply } from './types.js';

/** Bounds the messages one move keeps in flight, and so the work of one apply. */
export const MOVE_WINDOW_MAX = 1024;

/** Where a move stands: counts and what is in flight, for progress reports. */
export interface MoveProgress {
  readonly moveId: string;
  readonly count: number;
  readonly handedOut: number;
  readonly moved: number;
  readonly failed: number;
  readonly inFlight: number;
  readonly cancelled: boolean;
  readonly done: boolean;
}

export function moveProgress(state: QueueState): MoveProgress | null {
  const move = state.move;
  if (move === null) return null;
  const { id: moveId, count, handedOut, moved, failed, cancelled, done } = move;
  return { moveId, count, handedOut, moved, failed, inFlight: state.totals.moving.count, cancelled, done };
}

export function startMove(state: QueueState, command: MoveStartCommand): Reply {
  const current = state.move;
  // The same start twice (a retried proposal) changes nothing.
  if (current !== null && current.id === command.moveId) return { type: 'moveStarted', moveId: current.id, count: current.count };
  const ready = state.totals.ready.count;
  state.move = {
    id: command.moveId,
    exchange: command.exchange,
    routingKey: command.routingKey ?? null,
    window: command.window ?? 1,
    count: command.limit === undefined ? ready : Math.min(command.limit, ready),
    handedOut: 0,
    moved: 0,
    failed: 0,
    cancelled: false,
    done: false,
  };
  return { type: 'moveStarted', moveId: command.moveId, count: state.move.count };
}

function activeMove(state: QueueState, moveId: string): MoveState | null {
  const move = state.move;
  return move !== null && move.id === moveId ? move : null;
}

/** Settled messages of another (or no) move cannot be moving: such a command is a no-op. */
export function confirmMoved(state: QueueState, moveId: string, messageIds: readonly number[]): void {
  const move = activeMove(state, moveId);
  if (move === null) return;
  for (const id of messageIds) {
    const message = state.messages.get(id);
    if (message === undefined || message.place !== 'moving') continue;
    remove(state, message, 'moved');
    move.moved += 1;
  }
}

export function failMoved(state: QueueState, moveId: string, messageIds: readonly number[], now: number, effects: Effect[]): void {
  const move = activeMove(state, moveId);
  if (move === null) return;
  for (const id of messageIds) {
    const message = state.messages.get(id);
    if (message === undefined || message.place !== 'moving') continue;
    move.failed += 1;
    unholdMoving(state, message);
    // Like a returned delivery: one whose TTL ended on the way is dead-lettered, not requeued.
    if (isExpired(message, now)) deadLetter(state, message, 'expired', now, effects);
    // Spec 9: a newer message of its key came meanwhile: it replaces this one.
    else if (isSuperseded(state, message, now)) compact(state, message, now, effects);
  }
}

export function cancelMove(state: QueueState, moveId: string): void {
  const move = activeMove(state, moveId);
  if (move !== null) move.cancelled = true;
}

function moveEffect(move: MoveState, message: MessageHeader): Effect {
  return {
    type: 'move',
    moveId: move.id,
    messageId: message.id,
    exchange: move.exchange,
    routingKeys: move.routingKey === null ? [...message.routingKeys] : [move.routingKey],
    sizeBytes: message.sizeBytes,
    deaths: message.deaths,
  };
}

/** Run after every command: hand out within the window, and end the move when it is over. */
export function moveAvailable(state: QueueState, now: number, effects: Effect[]): void {
  const move = state.move;
  if (move === null || move.done) return;
  let sourceEmpty = false;
  while (!move.cancelled && move.handedOut < move.count && state.totals.moving.count < move.window) {
    const message = state.totals.ready.count === 0 ? undefined : takeLiveReady(state, now, effects);
    if (message === undefined) {
      sourceEmpty = true;
      break;
    }
    holdForMove(state, message);
    move.handedOut += 1;
    effects.push(moveEffect(move, message));
  }
  if (state.totals.moving.count > 0) return;
  const outcome = move.cancelled ? 'cancelled' : move.handedOut >= move.count ? 'count' : sourceEmpty ? 'empty' : null;
  if (outcome === null) return;
  move.done = true;
  effects.push({ type: 'moveDone', moveId: move.id, outcome, count: move.count, moved: move.moved, failed: move.failed });
}

/** What a new leader re-issues: the `move` effects of the messages still in flight, by id. */
export function pendingMoveEffects(state: QueueState): Effect[] {
  const move = state.move;
  if (move === null || state.totals.moving.count === 0) return [];
  return state.messages
    .values()
    .filter((message) => message.place === 'moving')
    .map((message) => moveEffect(move, message));
}
