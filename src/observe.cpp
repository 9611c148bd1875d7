// Observability hooks (placeholder, issue 7).
#include <redlock/observe.hpp>
