/* The smallest Tether program: open a context on a server (the demo server,
 * `make serve`, unless a URL is given) and list its entities. The C page
 * (bindings/c/README.md) builds it both ways, from the source tree and
 * installed; scripts/check-readme runs those lines as printed. */
#include <stdio.h>
#include <tether.h>

int main(int argc, char **argv)
{
    tether_context_options opts;
    tether_kinto_options kinto;
    tether_context *ctx;
    size_t count = 0;
    tether_context_options_init(&opts, TETHER_CONTEXT_OPTIONS_VERSION);
    tether_kinto_options_init(&kinto, TETHER_KINTO_OPTIONS_VERSION);
    kinto.server_url = argc > 1 ? argv[1] : "http://127.0.0.1:8888/v1";
    kinto.bucket = "demo";
    opts.store_path = "app.sqlite";
    printf("tether %s (built with %s)\n", tether_version(), TETHER_VERSION);
    if (tether_context_open_kinto(&opts, &kinto, &ctx) != TETHER_OK) {
        fprintf(stderr, "open: %s (is the demo server up? make serve)\n", tether_errmsg());
        return 1;
    }
    tether_context_entity_count(ctx, &count);
    for (size_t i = 0; i < count; i++) {
        tether_entity *entity;
        const char *name;
        if (tether_context_entity_at(ctx, i, &entity) == TETHER_OK &&
            tether_entity_name(entity, &name) == TETHER_OK)
            printf("entity %s\n", name);
    }
    tether_context_close(ctx);
    return 0;
}
