/**
 * The membership verbs record an intent and return; the groups' leaders then carry it out.
 * `waitUntil` polls the cluster until the change is seen done, or gives up after a timeout
 * with a message that says what it waited for and where it stood.
 */

/** A wait that ran out of time (the CLI prints its message and exits 1). */
export class WaitTimeout extends Error {
  override readonly name = 'WaitTimeout';
}

/** `true`: done; a string: where it stands (said on a timeout). */
export type Waiting = true | string;

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Calls `check` every `intervalMs` until it answers true. Its failures (a node restarting,
 * a leader moving, a node answering from stale metadata) are retried: only the deadline ends
 * the wait, with a WaitTimeout naming `what`, the last state and the last error.
 */
export async function waitUntil(what: string, timeoutMs: number, check: () => Promise<Waiting>, intervalMs = 250): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let state: string | null = null;
  let lastError: string | null = null;
  for (;;) {
    const remaining = deadline - Date.now();
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<'expired'>((resolve) => (timer = setTimeout(() => resolve('expired'), Math.max(0, remaining))));
    const attempt = check();
    // A check still running at the deadline is abandoned: its late failure must not go unhandled.
    attempt.catch(() => undefined);
    try {
      const answer = await Promise.race([attempt, expired]);
      if (answer === true) return;
      if (answer !== 'expired') {
        state = answer;
        lastError = null;
      }
    } catch (error) {
      lastError = error instanceof Error ? error.message : String(error);
    } finally {
      clearTimeout(timer);
    }
    if (Date.now() >= deadline) {
      const where = [state, lastError !== null ? `last error: ${lastError}` : null].filter((s) => s !== null).join('; ');
      throw new WaitTimeout(`timed out after ${timeoutMs} ms waiting for ${what}${where !== '' ? ` (${where})` : ''}`);
    }
    await sleep(Math.min(intervalMs, Math.max(0, deadline - Date.now())));
  }
}
