#include <jansson.h>

// json_decref and the type tests are macros or static inlines over the struct.
static inline void tether_json_decref(json_t *json) { json_decref(json); }
static inline json_t *tether_json_incref(json_t *json) { return json_incref(json); }
static inline json_type tether_json_typeof(const json_t *json) { return json_typeof(json); }
