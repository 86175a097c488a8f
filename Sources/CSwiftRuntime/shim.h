/* The one Swift runtime entry the core calls directly (Graph/Uniquing.swift):
 * a retain that fails on an object whose deinit has begun, returning NULL
 * (else the object). It is what a weak reference's load uses; declared here
 * because Swift reserves the name for the runtime. Linked from the runtime
 * itself (libswiftCore, statically in release builds). */
#ifndef TETHER_SWIFT_RUNTIME_SHIM_H
#define TETHER_SWIFT_RUNTIME_SHIM_H
void *swift_tryRetain(void *object);
#endif
