/// Every failure the core reports. `kind` is what a caller branches on; the
/// message is for people.
public struct TetherError: Error, CustomStringConvertible, Sendable {
    public enum Kind: Sendable, CaseIterable {
        case `internal`, misuse, closed, notFound, type, invalid
        case network, auth, server, `protocol`, store, cancelled, notCached, busy, conflict
        /// The server's spec does not allow the operation (insert, update, delete).
        case notAllowed
        /// The server no longer has the history a `since` listing asked for;
        /// the core then lists everything again.
        case expired
    }

    public let kind: Kind
    public let message: String
    /// A network failure before any answer: the server could not be reached
    /// at all (as opposed to an answer cut short). Only this opens offline.
    public let isUnreachable: Bool

    public init(_ kind: Kind, _ message: String, unreachable: Bool = false) {
        self.kind = kind
        self.message = message
        isUnreachable = unreachable
    }

    public var description: String { message }

    static let cancelled = TetherError(.cancelled, "cancelled")
    static let contextClosed = TetherError(.closed, "the context is closed")
}

extension TetherError {
    /// Any error as a TetherError: unexpected ones are internal errors.
    static func wrap(_ error: any Error) -> TetherError {
        error as? TetherError ?? TetherError(.internal, "\(error)")
    }
}

extension Result where Failure == TetherError {
    /// The result of `body`, its error as a TetherError.
    static func tether(_ body: () throws -> Success) -> Result {
        do { return .success(try body()) } catch { return .failure(TetherError.wrap(error)) }
    }
}
