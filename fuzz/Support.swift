// Shared by every fuzz target (scripts/fuzz compiles it into each).

/// `precondition`, with its message kept in an optimized build.
func require(_ condition: Bool, _ message: @autoclosure () -> String = "", line: Int = #line) {
    if !condition { fatalError("line \(line): \(message())") }
}
