/// The end of a sync or whole listing: the server's ids and versions, listed
/// whole (only those two fields where the connection can), against the
/// store's. What changed since a version cannot show history rewritten
/// behind a newer change: Kinto takes a PUT's older `last_modified` as is
/// (a restore), without moving the collection's timestamp (memory backend)
/// or while a later change moves it on (PostgreSQL), so the record is in no
/// `_since` listing and the ETag and count agree. Rows whose version
/// differs, and rows the server did not list, are asked for by id and taken
/// as the server has them now, older or not; those it lacks leave the store,
/// their observers and live fetches told.
///
/// Cost: the listing's pages (one request up to the server's page size),
/// about 40 bytes a record; a request per batch of ids only when something differs.
struct VersionCheck: Sendable {
    let context: Context
    let store: Store
    let connection: any Connection
    let worker: WorkQueue
    let entity: Entity
    /// Hands each request on the wire to the fetch, for its cancel.
    let sent: @Sendable (any Cancellable) -> Void
    /// Whether the fetch still wants the answer (not cancelled, not given up).
    let isCurrent: @Sendable () -> Bool
    /// On the worker: whether the store changed, or the error that ended the check.
    let done: @Sendable (Result<Bool, TetherError>) -> Void

    func start() { list(nil, listed: [:], cursors: CursorTrail()) }

    private func list(_ cursor: PageCursor?, listed: [ExactString: Int64?], cursors: CursorTrail) {
        var request = PageRequest(spec: entity.spec)
        // By id: a record changed meanwhile keeps its place, so none is missed or listed twice.
        request.sort = [SortKey(field: entity.spec.idField, descending: false)]
        request.fields = [entity.spec.idField, entity.spec.versionField]
        request.cursor = cursor
        request.readsEveryPage = true  // into a dictionary: any order of the key will do
        let remote = connection.page(request) { [self] result in
            worker.async { [self] in
                guard isCurrent() else { return }
                do {
                    let page = try result.get()
                    var listed = listed
                    let idName = entity.attributes[entity.idIndex].name
                    let versionName = entity.attributes[entity.versionIndex].name
                    for fields in try page.decode().records {
                        guard case .string(let id)? = fields.first(where: { $0.key.hasSameBytes(as: idName) })?.value else { continue }
                        listed[ExactString(id)] = fields.first { $0.key.hasSameBytes(as: versionName) }?.value.integerValue
                    }
                    if let next = page.next {
                        var cursors = cursors
                        try cursors.advance(to: next, of: entity.name)
                        return list(next, listed: listed, cursors: cursors)
                    }
                    try compare(listed)
                } catch {
                    done(.failure(TetherError.wrap(error)))
                }
            }
        }
        sent(remote)
    }

    private func compare(_ listed: [ExactString: Int64?]) throws {
        var notHeld = listed
        var differing: [String] = []
        for (id, version) in try store.versions(entity, where: nil, sort: [], limit: 0, offset: 0) {
            // Not listed: deleted on the server (or new since the listing: the by-id answer tells).
            guard let server = notHeld.removeValue(forKey: ExactString(id)) else {
                differing.append(id)
                continue
            }
            if server != version { differing.append(id) }
        }
        differing += notHeld.keys.map(\.string).sorted()
        guard !differing.isEmpty else { return done(.success(false)) }
        Log.info(.sync, "\(entity.name): \(differing.count) records differ from the server's ids and versions "
                        + "(history rewritten, or changed since the listing): asked again")
        ByIDRefetch(context: context, store: store, connection: connection, worker: worker, entity: entity,
                    acceptingOlder: true, sent: sent, isCurrent: isCurrent) { [done] outcome in
            done(outcome.map { true })
        }.start(differing)
    }
}
