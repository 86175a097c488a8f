// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "Tether",
    products: [
        // libtether.so: the C ABI declared in include/tether.h.
        .library(name: "tether", type: .dynamic, targets: ["TetherC"]),
    ],
    targets: [
        .systemLibrary(name: "CSQLite", path: "Sources/CSQLite"),
        .systemLibrary(name: "CCurl", path: "Sources/CCurl"),
        // swift_tryRetain, for uniquing without weak references.
        .systemLibrary(name: "CSwiftRuntime", path: "Sources/CSwiftRuntime"),
        // The public header, seen by the boundary layer only.
        .systemLibrary(name: "CTetherABI", path: "Sources/CTetherABI"),
        .target(
            name: "Tether",
            dependencies: ["CSQLite", "CCurl", "CSwiftRuntime"],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        .target(
            name: "TetherC",
            dependencies: ["Tether", "CTetherABI"],
            exclude: ["exports.map"],  // the release link's version script (Makefile)
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        .testTarget(
            name: "TetherTests",
            dependencies: ["Tether"],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
    ]
)
