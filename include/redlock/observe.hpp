#pragma once
/// @file
/// Observability hooks (placeholder, issue 7).
