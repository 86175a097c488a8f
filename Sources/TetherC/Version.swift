// The C ABI of include/tether.h, one file per section of the header (this
// one: "version"). Each function checks its handles and arguments, converts
// types, and forwards to the core.
import CTetherABI
import Glibc

private let versionText = ConstantCString(TETHER_VERSION)

@_cdecl("tether_version")
public func tether_version() -> UnsafePointer<CChar> { versionText.pointer }

@_cdecl("tether_version_number")
public func tether_version_number() -> Int32 { TETHER_VERSION_NUMBER }
