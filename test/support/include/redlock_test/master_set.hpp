// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// Real `redis-server` processes for integration tests, benchmarks and the demonstration: each on
/// a free loopback port, in a private temporary directory, with no persistence, and with
/// process-level fault injection (stop, kill, pause, resume, restart on the same port).
///
/// The test bed's names for the local-masters library (tools/local_masters/local_masters.hpp),
/// which `redlock nodes` and the demonstration use too; see there for each operation.
///
/// Thread-safety: none. Create, use and destroy a set and its nodes from one thread, and keep
/// that thread alive while the servers run: the servers are started with a parent-death signal,
/// which Linux ties to the thread that forked them (normally the test's main thread).

#include <local_masters.hpp>

namespace redlock::test {

/// An extra ACL user, created with full rights (`+@all ~* &*`).
using acl_user = local::acl_user;
/// A TLS listener next to the plain port (`redis_node::tls_port()`).
using tls_options = local::tls_options;
/// How the servers of a `master_set` are started.
using redis_options = local::server_options;
/// One `redis-server` process, owned by a `master_set`; keeps its port while down.
using redis_node = local::node;
/// A set of independent masters on loopback, started in parallel; the destructor kills them.
using master_set = local::node_set;
/// Redis Clusters on loopback, each one Redlock master (`redis-cluster://` entries).
using cluster_set = local::cluster_set;

}  // namespace redlock::test
