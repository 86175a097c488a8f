/// What a binding lends out for the rows of one answer, made as rows are
/// read: the C ABI lends each row's object handle and id string, valid
/// while the answer is. With the answer's batch size, only the batch of the
/// last row read keeps its loans: reading a row of another batch gives the
/// previous batch's back, so lending stays bounded however far a host
/// reads (as `FetchedResults` holds one batch of objects). Without one,
/// loans last until `giveBackAll`.
///
/// Not generic: a loan is a C pointer's bits (never 0), so the class is
/// compiled (and optimized) here rather than left unspecialized for the
/// binding's module, which cost a generic metadata lookup per row.
public final class RowLoans: Sendable {
    public enum Kind: Int, Sendable { case object = 0, id = 1 }

    private struct State {
        var batch = 0
        /// With batches: by kind, the batch's rows in place (0: none lent).
        var rows: [[UInt]] = [[], []]
        /// Without (or batches too large to keep in place): by kind, by row.
        var loans: [[Int: UInt]] = [[:], [:]]

        var all: [(kind: Kind, loan: UInt)] {
            var found: [(kind: Kind, loan: UInt)] = []
            for kind in [Kind.object, .id] {
                for loan in rows[kind.rawValue] where loan != 0 { found.append((kind, loan)) }
                for loan in loans[kind.rawValue].values { found.append((kind, loan)) }
            }
            return found
        }
    }

    private let batchSize: Int
    /// Batches kept as arrays (no hashing per row) up to this size.
    private static let inPlaceBatch = 1 << 16
    private let state = Lock(State())
    /// Called outside the lock with the loans given back.
    private let giveBack: @Sendable ([(kind: Kind, loan: UInt)]) -> Void

    /// `batchSize` 0: no batches.
    public init(batchSize: Int, giveBack: @escaping @Sendable ([(kind: Kind, loan: UInt)]) -> Void) {
        self.batchSize = batchSize
        self.giveBack = giveBack
    }

    /// The loan of `kind` for row `index`: the one lent before, else
    /// `make`'s (made with the lock held, so each is made once; never 0).
    public func loan(_ kind: Kind, row index: Int, make: () throws -> UInt) throws -> UInt {
        var returned: [(kind: Kind, loan: UInt)] = []
        defer { if !returned.isEmpty { giveBack(returned) } }
        return try state.withLock { state in
            if batchSize > 0, index / batchSize != state.batch {
                state.batch = index / batchSize
                returned = state.all
                state = State(batch: state.batch)
            }
            guard batchSize > 0, batchSize <= Self.inPlaceBatch else {
                if let held = state.loans[kind.rawValue][index] { return held }
                let loan = try make()
                state.loans[kind.rawValue][index] = loan
                return loan
            }
            let slot = index % batchSize
            if state.rows[kind.rawValue].isEmpty { state.rows[kind.rawValue] = Array(repeating: 0, count: batchSize) }
            let held = state.rows[kind.rawValue][slot]
            if held != 0 { return held }
            let loan = try make()
            state.rows[kind.rawValue][slot] = loan
            return loan
        }
    }

    /// Gives every loan back (the answer is released).
    public func giveBackAll() {
        let returned = state.withLock { state in
            defer { state = State() }
            return state.all
        }
        if !returned.isEmpty { giveBack(returned) }
    }
}
