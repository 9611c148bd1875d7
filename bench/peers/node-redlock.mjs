// SPDX-License-Identifier: BSL-1.0
// Peer driver: node-redlock (npm `redlock`, 5.0.0-beta.2) on five ioredis clients, one per master,
// as its README shows. Usage and scenarios: README.md beside this file.

import Redlock from 'redlock';
import { main } from './common.mjs';

// The library's documented defaults (README / dist defaultSettings).
const defaults = { driftFactor: 0.01, retryCount: 10, retryDelay: 200, retryJitter: 100, automaticExtensionThreshold: 500 };

await main({
  name: 'node-redlock',
  package: 'redlock',
  defaults,
  // Scenario c: keep trying for the whole run. A retry waits retryDelay +/- retryJitter (uniform),
  // so retryCount = run length / retryDelay lets a contender keep trying for about the run and no
  // longer (which also bounds the tail after the deadline).
  contentionRetry(o) {
    const retryDelay = o.retryDelay ?? 20;
    const retryJitter = o.retryJitter ?? 20;
    const retryCount = Math.ceil((o.seconds * 1000) / Math.max(1, retryDelay)) + 1;
    return { driftFactor: defaults.driftFactor, retryCount, retryDelay, retryJitter,
      source: `retryCount derived from --seconds; retryDelay ${o.retryDelay === undefined ? 'driver default' : '--retry-delay'}, ` +
        `retryJitter ${o.retryJitter === undefined ? 'driver default' : '--retry-jitter'}` };
  },
  make(clients, { retry, ttlMs }) {
    // a, b, d: documented defaults (no settings passed). c: the retry settings above.
    const redlock = retry
      ? new Redlock(clients, { retryCount: retry.retryCount, retryDelay: retry.retryDelay, retryJitter: retry.retryJitter })
      : new Redlock(clients);
    return {
      locker(resource) {
        return {
          acquire: () => redlock.acquire([resource], ttlMs),
          // release() resolves once a quorum removed the key, and throws otherwise.
          release: async (lock) => {
            await redlock.release(lock);
            return true;
          },
        };
      },
    };
  },
});
