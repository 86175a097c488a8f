/// Asks the server again, by id, for records the store may hold wrongly:
/// rows a filtered answer did not name, rows the version check found
/// differing. Takes what the server has (older versions too, where
/// `acceptingOlder`), and deletes from the store the ids it lacks, their
/// observers and live fetches told.
struct ByIDRefetch: Sendable {
    let context: Context
    let store: Store
    let connection: any Connection
    let worker: WorkQueue
    let entity: Entity
    let acceptingOlder: Bool
    /// Hands each request on the wire to the fetch, for its cancel.
    let sent: @Sendable (any Cancellable) -> Void
    /// Whether the fetch still wants the answer (not cancelled, not given up).
    let isCurrent: @Sendable () -> Bool
    /// On the worker, once: every id asked and its answer stored, or the error that ended it.
    let done: @Sendable (Result<Void, TetherError>) -> Void

    func start(_ ids: [String]) {
        fetch(connection.idBatches(ids), cursor: nil, seen: [], cursors: CursorTrail())
    }

    /// `serial`: the store's next write when the batch's first page was asked for.
    private func fetch(_ batches: [[String]], cursor: PageCursor?, seen: Set<ExactString>, cursors: CursorTrail,
                       since serial: Int64? = nil) {
        guard let batch = batches.first else { return done(.success(())) }
        // Rows written from now on (a save's answer) are newer than what this batch says is gone.
        let serial = serial ?? ((try? store.nextWrite()) ?? .max)
        let remote = connection.records(entity.spec, ids: batch, cursor: cursor) { [self] result in
            worker.async { [self] in
                guard isCurrent() else { return }
                do {
                    let page = try result.get()
                    var seen = seen
                    seen.formUnion(try context.absorb(page.decode(), of: entity, acceptingOlder: acceptingOlder, askedAt: serial)
                        .map { ExactString($0.id) })
                    if let next = page.next {
                        var cursors = cursors
                        try cursors.advance(to: next, of: entity.name)
                        return fetch(batches, cursor: next, seen: seen, cursors: cursors, since: serial)
                    }
                    let unseen = batch.filter { !seen.contains(ExactString($0)) }
                    context.markDeleted(try store.delete(ids: unseen, of: entity, unlessWrittenSince: serial), of: entity)
                    fetch(Array(batches.dropFirst()), cursor: nil, seen: [], cursors: CursorTrail())
                } catch {
                    done(.failure(TetherError.wrap(error)))
                }
            }
        }
        sent(remote)
    }
}
