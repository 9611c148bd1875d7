// SPDX-License-Identifier: BSL-1.0
// Peer driver: redlock-universal's RedLock (createRedlock) with IoredisAdapter on five ioredis
// clients, one per master, as its README shows. Usage and scenarios: README.md beside this file.
//
// A RedLock object is bound to one key (createRedlock({adapters, key, ...})): each benchmark loop
// creates one for its resource and acquires/releases it repeatedly, as the README's
// acquire()/release(handle) example does.

import { createRedlock, IoredisAdapter } from 'redlock-universal';
import { main } from './common.mjs';

// The library's documented defaults for createRedlock (README "Configuration"; no jitter option).
const defaults = { retryAttempts: 3, retryDelay: 200, clockDriftFactor: 0.01, quorum: 'floor(n/2)+1' };

await main({
  name: 'redlock-universal',
  package: 'redlock-universal',
  defaults,
  // Scenario c: keep trying for the whole run. The library retries after a fixed retryDelay (it
  // has no jitter setting); retryAttempts = run length / retryDelay.
  contentionRetry(o) {
    const retryDelay = o.retryDelay ?? 20;
    const retryAttempts = Math.ceil((o.seconds * 1000) / Math.max(1, retryDelay)) + 1;
    return { retryAttempts, retryDelay, retryJitter: null, clockDriftFactor: defaults.clockDriftFactor,
      source: `retryAttempts derived from --seconds; retryDelay ${o.retryDelay === undefined ? 'driver default' : '--retry-delay'}; ` +
        'the library has no jitter setting (--retry-jitter is ignored)' };
  },
  make(clients, { retry, ttlMs }) {
    const adapters = clients.map((c) => new IoredisAdapter(c));
    const extra = retry ? { retryAttempts: retry.retryAttempts, retryDelay: retry.retryDelay } : {};
    return {
      locker(resource) {
        const lock = createRedlock({ adapters, key: resource, ttl: ttlMs, ...extra });
        return {
          acquire: () => lock.acquire(),
          // release() resolves true when a quorum of masters deleted the key.
          release: (handle) => lock.release(handle),
        };
      },
    };
  },
});
