# Tether — the README's commands: `make demo`, `make serve` and `make test`.
# Both install what they need (Debian packages, Kinto in .venv) first.

SWIFT        ?= swift
PYTHON       ?= python3
BUILD_DIR    := build
LIB          := $(BUILD_DIR)/libtether.so
VENV         := .venv
# The version, read from the header (the one place it is written).
version_part = $(shell sed -n 's/^\#define TETHER_VERSION_$(1)  *\([0-9][0-9]*\).*/\1/p' include/tether.h)
VERSION_MAJOR := $(call version_part,MAJOR)
VERSION_MINOR := $(call version_part,MINOR)
VERSION_PATCH := $(call version_part,PATCH)
VERSION      := $(VERSION_MAJOR).$(VERSION_MINOR).$(VERSION_PATCH)
ifneq ($(words $(VERSION_MAJOR) $(VERSION_MINOR) $(VERSION_PATCH)),3)
$(error include/tether.h: no TETHER_VERSION_MAJOR, _MINOR and _PATCH to read)
endif
SONAME       := libtether.so.$(VERSION_MAJOR)
# Release builds link the Swift runtime statically, export only tether_* and
# carry the soname libtether.so.<major>; exclusivity is checked at run time in
# debug and sanitizer builds only.
RELEASE_FLAGS := -c release -Xswiftc -static-stdlib -Xswiftc -enforce-exclusivity=unchecked \
                 -Xlinker --version-script=$(CURDIR)/Sources/TetherC/exports.map \
                 -Xlinker -soname=$(SONAME)
APT_PACKAGES := libcurl4-openssl-dev libsqlite3-dev libjansson-dev libedit-dev python3-venv gcc make pkg-config luajit curl
# make install: $(DESTDIR)$(PREFIX)/lib/libtether.so.$(VERSION) and its links,
# include/tether.h, lib/pkgconfig/tether.pc (from tether.pc.in), bin/tether (the shell).
PREFIX       ?= /usr/local
DESTDIR      ?=

.PHONY: all deps build demo serve serve-stop serve-status test test-swift test-c test-python test-lua bench fuzz kill-stress clean install uninstall

all: build

deps:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi
	@scripts/kinto-install
	@$(VENV)/bin/python -c 'import pytest' 2>/dev/null || $(VENV)/bin/pip install -q 'pytest==8.3.5'
	@$(VENV)/bin/python -c 'import kinto_http' 2>/dev/null || $(VENV)/bin/pip install -q 'kinto-http==11.11.0'
	@# mypy for the types suite: 1.19 is the last that checks for Python 3.9 (the
	@# binding's oldest); the exact version, as misuse.py's expected errors follow it.
	@$(VENV)/bin/python -c 'import mypy.version as v, sys; sys.exit(v.__version__ != "1.19.1")' 2>/dev/null || $(VENV)/bin/pip install -q 'mypy==1.19.1'

build: deps $(LIB) $(BUILD_DIR)/$(SONAME)
	@$(MAKE) -s -C bindings/c all LIBDIR=$(CURDIR)/$(BUILD_DIR)

# The release flags, kept in a file rewritten only when they change, so that a
# change of flags (the soname's, say) relinks the library.
$(BUILD_DIR)/release-flags: FORCE
	@mkdir -p $(BUILD_DIR)
	@echo '$(RELEASE_FLAGS)' | cmp -s - $@ || echo '$(RELEASE_FLAGS)' > $@
.PHONY: FORCE

$(LIB): Package.swift include/tether.h $(shell find Sources -type f) $(BUILD_DIR)/release-flags
	$(SWIFT) build $(RELEASE_FLAGS)
	@mkdir -p $(BUILD_DIR)
	@# Copy, then rename: a process that has the old library mapped keeps it intact.
	cp "$$($(SWIFT) build $(RELEASE_FLAGS) --show-bin-path)/libtether.so" $(LIB).tmp
	@if ldd $(LIB).tmp | grep -qi swift; then echo "libtether.so links Swift libraries dynamically" >&2; exit 1; fi
	@if ! readelf -d $(LIB).tmp | grep -q 'SONAME.*\[$(SONAME)\]'; then echo "libtether.so's soname is not $(SONAME)" >&2; exit 1; fi
	mv -f $(LIB).tmp $(LIB)

# Programs linked with -Lbuild -ltether need the soname: build/libtether.so.<major>.
$(BUILD_DIR)/$(SONAME): $(LIB)
	ln -sfn libtether.so $@

# Installs the release library (building it if needed; not the demo's Kinto)
# and the shell, linked to find the library in $(PREFIX)/lib.
# DESTDIR stages the files; tether.pc names $(PREFIX), where they will be used.
install: $(LIB) $(BUILD_DIR)/$(SONAME)
	@$(MAKE) -s -C bindings/c install-shell LIBDIR=$(CURDIR)/$(BUILD_DIR) PREFIX=$(PREFIX)
	install -d "$(DESTDIR)$(PREFIX)/lib/pkgconfig" "$(DESTDIR)$(PREFIX)/include" "$(DESTDIR)$(PREFIX)/bin"
	install -m 755 bindings/c/build/install/tether "$(DESTDIR)$(PREFIX)/bin/tether"
	install -m 755 $(LIB) "$(DESTDIR)$(PREFIX)/lib/libtether.so.$(VERSION)"
	ln -sfn libtether.so.$(VERSION) "$(DESTDIR)$(PREFIX)/lib/$(SONAME)"
	ln -sfn $(SONAME) "$(DESTDIR)$(PREFIX)/lib/libtether.so"
	install -m 644 include/tether.h "$(DESTDIR)$(PREFIX)/include/tether.h"
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' tether.pc.in > "$(DESTDIR)$(PREFIX)/lib/pkgconfig/tether.pc"
	chmod 644 "$(DESTDIR)$(PREFIX)/lib/pkgconfig/tether.pc"

# Removes exactly what install put there (directories stay).
uninstall:
	rm -f "$(DESTDIR)$(PREFIX)/lib/libtether.so.$(VERSION)" "$(DESTDIR)$(PREFIX)/lib/$(SONAME)" \
	      "$(DESTDIR)$(PREFIX)/lib/libtether.so" "$(DESTDIR)$(PREFIX)/include/tether.h" \
	      "$(DESTDIR)$(PREFIX)/lib/pkgconfig/tether.pc" "$(DESTDIR)$(PREFIX)/bin/tether"

demo: build
	scripts/demo

# The demo server the README examples use: Kinto on 127.0.0.1:8888 (KINTO_PORT=N
# for another), seeded with the demo data, up until `make serve-stop`
# (scripts/demo-server start|stop|status).
serve: deps
	scripts/demo-server start
serve-stop:
	scripts/demo-server stop
serve-status:
	scripts/demo-server status

test: build
	scripts/run-tests

test-swift test-c test-python test-lua: build
	scripts/run-tests $(patsubst test-%,%,$@)

# The libFuzzer targets (fuzz/), FUZZ_SECONDS each (make test runs them briefly),
# the differential test for FUZZ_SECONDS a connection (make test: a few), the
# live fetches' model-based random test for FUZZ_SECONDS (make test: 8) on Kinto's
# memory backend, then on its PostgreSQL backend, and the delete rules model test
# (bindings/python/tests/test_delete_rules_model.py) for FUZZ_SECONDS (make test: 3).
fuzz: deps
	FUZZ_SECONDS=$${FUZZ_SECONDS:-300} scripts/fuzz records schema predicates handles specdef differential live live-postgresql rules

# The kill test's journaled rounds, KILL_ROUNDS of them (make test runs 8):
# a child killed in a burst of changes, at a save's start, mid-save or after
# it, the server compared with its journal at the end. KILL_SERVER=postgres
# runs them over a PostgreSQL schema instead of Kinto.
kill-stress: build
	$(MAKE) -C bindings/c build/tests/test_kill
	if [ "$${KILL_SERVER:-kinto}" = postgres ]; then \
	    TETHER_KILL_SERVER=postgres TETHER_KILL_ROUNDS=$${KILL_ROUNDS:-200} TETHER_KILL_SCENARIOS=0 scripts/with-postgres bindings/c/build/tests/test_kill; \
	else \
	    TETHER_KILL_ROUNDS=$${KILL_ROUNDS:-200} TETHER_KILL_SCENARIOS=0 scripts/with-kinto bindings/c/build/tests/test_kill; \
	fi

# bench: Kinto on PostgreSQL (scripts/pg-start) holding 100,000 records seeded by SQL.
bench: build $(BUILD_DIR)/first_peek $(BUILD_DIR)/peek $(BUILD_DIR)/big_cache $(BUILD_DIR)/save $(BUILD_DIR)/fetch
	KINTO_BACKEND=postgresql KINTO_PAGINATE_BY=10000 scripts/with-kinto $(VENV)/bin/python bench/run.py

# bench-quick (CI): memory backend, 300 records, one run a row: checks that every row runs.
.PHONY: bench-quick
bench-quick: build $(BUILD_DIR)/first_peek $(BUILD_DIR)/peek $(BUILD_DIR)/big_cache $(BUILD_DIR)/save $(BUILD_DIR)/fetch
	BENCH_QUICK=1 scripts/with-kinto $(VENV)/bin/python bench/run.py

$(BUILD_DIR)/first_peek: bench/first_peek.c bench/benchutil.h include/tether.h $(LIB) $(BUILD_DIR)/$(SONAME)
	$(CC) -std=c99 -O2 -Wall -Wextra -Werror -Iinclude $< -L$(BUILD_DIR) -ltether -lsqlite3 -lpthread -o $@

$(BUILD_DIR)/peek: bench/peek.c bench/benchutil.h include/tether.h $(LIB) $(BUILD_DIR)/$(SONAME)
	$(CC) -std=c99 -O2 -Wall -Wextra -Werror -Iinclude $< -L$(BUILD_DIR) -ltether -lsqlite3 -lpthread -o $@

$(BUILD_DIR)/big_cache: bench/big_cache.c bench/benchutil.h include/tether.h $(LIB) $(BUILD_DIR)/$(SONAME)
	$(CC) -std=c99 -O2 -Wall -Wextra -Werror -Iinclude $< -L$(BUILD_DIR) -ltether -lsqlite3 -lpthread -o $@

$(BUILD_DIR)/fetch: bench/fetch.c bench/benchutil.h include/tether.h $(LIB) $(BUILD_DIR)/$(SONAME)
	$(CC) -std=c99 -O2 -Wall -Wextra -Werror -Iinclude $< -L$(BUILD_DIR) -ltether -lpthread -o $@

$(BUILD_DIR)/save: bench/save.c bench/benchutil.h include/tether.h $(LIB) $(BUILD_DIR)/$(SONAME)
	$(CC) -std=c99 -O2 -Wall -Wextra -Werror -Iinclude $< -L$(BUILD_DIR) -ltether -lpthread -o $@

clean:
	rm -rf .build .build-fuzz $(BUILD_DIR) bindings/c/build .run
