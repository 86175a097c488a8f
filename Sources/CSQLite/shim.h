#include <sqlite3.h>

// SQLITE_TRANSIENT is a macro Swift cannot import: the cast of -1 to a destructor.
static inline sqlite3_destructor_type tether_sqlite_transient(void) { return SQLITE_TRANSIENT; }
