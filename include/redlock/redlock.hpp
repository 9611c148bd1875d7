// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// Everything of redlock-asio in one include, except the opt-in fmt formatters of
/// `redlock/format.hpp` (which need fmt).

#include <redlock/client.hpp>
#include <redlock/clock.hpp>
#include <redlock/config.hpp>
#include <redlock/connection.hpp>
#include <redlock/error.hpp>
#include <redlock/hazard.hpp>
#include <redlock/lock.hpp>
#include <redlock/master_result.hpp>
#include <redlock/observe.hpp>
#include <redlock/prometheus.hpp>
#include <redlock/resp/node.hpp>
#include <redlock/resp/parser.hpp>
#include <redlock/resp/request.hpp>
#include <redlock/timer.hpp>
#include <redlock/version.hpp>
#include <redlock/with_lock.hpp>
