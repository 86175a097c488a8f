/// Every failure the core reports. `kind` is what a caller branches on; the
/// message is for people.
public struct TetherError: Error, CustomStringConvertible, Sendable {
    public enum Kind: Sendable {
        case `internal`, misuse, closed, notFound, type, invalid
        case network, auth, server, `protocol`, store, cancelled, notCached, busy
    }

    public let kind: Kind
    public let message: String

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { message }

    static let cancelled = TetherError(.cancelled, "cancelled")
    static let contextClosed = TetherError(.closed, "the context is closed")
}
