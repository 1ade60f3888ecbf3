// worker-watch.js: the pages' model workers are restarted when their thread stops answering while they load.
//
// Why: Firefox ESR 153 sometimes never returns from `new Worker()` called inside a worker, which is what
// createSdpa's threads build does to start its pthread pool. The worker's thread then stays blocked for good:
// createSdpa's initTimeout cannot fire and no message comes. Seen in the bench page's load under CPU load,
// about 1 load in 30 when another page of the same site had just closed (2 to 4 in each run of 25 to 100
// loads; none in 70 when each load waited 3 s after the close). A fresh worker loads.
//
// So a worker beats (posts { type: 'alive' }) while it loads, and its page ends it and starts another when
// it hears nothing for SILENCE_MS. A load that is only slow (a slow network) keeps beating: its thread is free.
// (With the beat, 300 loads in the same conditions needed no restart: a worker whose event loop is busy
// seems to meet the hang less often. It still comes: a whole Firefox run of tests/browser needs one or two.)

export const BEAT_MS = 500;
export const SILENCE_MS = 10_000;
export const MAX_RESTARTS = 2;

/** In the worker: posts { type: 'alive' } every BEAT_MS; returns the function that stops it. */
export function beatWhileLoading(post) {
  post({ type: 'alive' });
  const timer = setInterval(() => post({ type: 'alive' }), BEAT_MS);
  return () => clearInterval(timer);
}

/**
 * In the page: watches a worker that loads. Call heard() on each of its messages and done() once it has
 * loaded (or failed in words); `onSilent()` runs if SILENCE_MS pass with no message first.
 */
export function watchLoad(onSilent, silenceMs = SILENCE_MS) {
  let timer = setTimeout(onSilent, silenceMs);
  return {
    heard() {
      if (timer === null) return;
      clearTimeout(timer);
      timer = setTimeout(onSilent, silenceMs);
    },
    done() {
      clearTimeout(timer);
      timer = null;
    },
  };
}

/** What a page says (console.warn) when it restarts a silent worker. */
export const restartWarning = (what, n) =>
  `${what}: the worker did not answer for ${SILENCE_MS / 1000} s while loading (its thread is blocked: Firefox can hang ` +
  `creating a worker inside a worker); ended it and started another (restart ${n} of ${MAX_RESTARTS})`;
