#pragma once
/// @file
/// Everything of redlock-asio in one include.

#include <redlock/client.hpp>
#include <redlock/config.hpp>
#include <redlock/connection.hpp>
#include <redlock/error.hpp>
#include <redlock/lock.hpp>
#include <redlock/observe.hpp>
#include <redlock/resp/node.hpp>
#include <redlock/resp/parser.hpp>
#include <redlock/resp/request.hpp>
#include <redlock/version.hpp>
#include <redlock/with_lock.hpp>
