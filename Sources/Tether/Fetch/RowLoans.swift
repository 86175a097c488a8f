/// What a binding lends out for the rows of one answer, made as rows are
/// read: the C ABI lends each row's object handle and id string, valid
/// while the answer is. With the answer's batch size, only the batch of the
/// last row read keeps its loans: reading a row of another batch gives the
/// previous batch's back, so lending stays bounded however far a host
/// reads (as `FetchedResults` holds one batch of objects). Without one,
/// loans last until `giveBackAll`.
public final class RowLoans<Kind: Hashable & Sendable, Loan> {
    private struct State {
        var batch = 0
        var loans: [Kind: [Int: Loan]] = [:]
    }

    private let batchSize: Int
    private let state = Lock(State())
    /// Called outside the lock with the loans given back.
    private let giveBack: @Sendable ([Loan]) -> Void

    /// `batchSize` 0: no batches.
    public init(batchSize: Int, giveBack: @escaping @Sendable ([Loan]) -> Void) {
        self.batchSize = batchSize
        self.giveBack = giveBack
    }

    /// The loan of `kind` for row `index`: the one lent before, else
    /// `make`'s (made with the lock held, so each is made once).
    public func loan(_ kind: Kind, row index: Int, make: () throws -> Loan) throws -> Loan {
        var returned: [Loan] = []
        defer { if !returned.isEmpty { giveBack(returned) } }
        return try state.withLock { state in
            if batchSize > 0, index / batchSize != state.batch {
                state.batch = index / batchSize
                returned = state.loans.values.flatMap(\.values)
                state.loans = [:]
            }
            if let held = state.loans[kind]?[index] { return held }
            let loan = try make()
            state.loans[kind, default: [:]][index] = loan
            return loan
        }
    }

    /// Gives every loan back (the answer is released).
    public func giveBackAll() {
        let returned = state.withLock { state in
            defer { state = State() }
            return state.loans.values.flatMap(\.values)
        }
        if !returned.isEmpty { giveBack(returned) }
    }
}

// Loans pass between threads only through the lock.
extension RowLoans: Sendable where Loan: Sendable {}
