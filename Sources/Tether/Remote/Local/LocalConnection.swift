/// The "server" of local entities: their own store. A save's writes to them
/// are applied to their table under the same conditions a server applies
/// (`RecordWrite.verdict`), so a stale edit from a sibling conflicts as it
/// would on Kinto, and a write applied before a crash is found applied
/// after it. Nothing is fetched from it: the core reads local entities from
/// their store directly.
final class LocalConnection: Connection {
    /// Each local entity by route, with its store.
    private let entities: [String: (entity: Entity, store: Store)]
    private let requests = RequestQueue()

    init(model: Model, stores: [Store]) {
        entities = Dictionary(model.entities.filter(\.isLocal).map { ($0.route, ($0, stores[$0.storeIndex])) },
                              uniquingKeysWith: { first, _ in first })
    }

    var identity: String { "local stores" }

    /// Whether `spec` is a local entity's.
    func holds(_ spec: Spec) -> Bool { entities[spec.route] != nil }

    func shutdown() { requests.shutdown() }

    private func respond<T: Sendable>(_ done: @escaping @Sendable (Result<T, TetherError>) -> Void,
                                      _ work: @escaping @Sendable () throws -> T) -> any Cancellable {
        requests.respond(done, work)
    }

    private func notFetched(_ spec: Spec) -> TetherError {
        TetherError(.misuse, "\(spec.name) is local: its store is its truth, with no server to ask")
    }

    func serverInfo(_ done: @escaping @Sendable (Result<ServerInfo, TetherError>) -> Void) -> any Cancellable {
        respond(done) { ServerInfo(name: "local", version: "1") }
    }

    func specs(_ done: @escaping @Sendable (Result<[Spec], TetherError>) -> Void) -> any Cancellable {
        respond(done) { [entities] in entities.values.map(\.entity.spec) }
    }

    func page(_ request: PageRequest, _ done: @escaping @Sendable (Result<Page, TetherError>) -> Void) -> any Cancellable {
        let error = notFetched(request.spec)
        return respond(done) { throw error }
    }

    func count(_ request: PageRequest, _ done: @escaping @Sendable (Result<Int64, TetherError>) -> Void) -> any Cancellable {
        let error = notFetched(request.spec)
        return respond(done) { throw error }
    }

    func records(_ spec: Spec, ids: [String], cursor: PageCursor?,
                 _ done: @escaping @Sendable (Result<Page, TetherError>) -> Void) -> any Cancellable {
        let error = notFetched(spec)
        return respond(done) { throw error }
    }

    /// A record's next version: above the last, and a time in ms, as Kinto's.
    static func nextVersion(after current: Value?) -> Int64 {
        guard case .integer(let version)? = current else { return wallClockMilliseconds() }
        return max(version &+ 1, wallClockMilliseconds())
    }

    func idBatches(_ ids: [String]) -> [[String]] { ids.isEmpty ? [] : [ids] }

    func supports(_ filter: Filter) -> Bool { false }
    func filtersExactly(_ filter: Filter) -> Bool { false }
    var changeListingsCanMissRewrites: Bool { false }  // the store is the truth
    func limit(ofServerQuery query: String) -> Int64? { nil }  // it takes no server query

    /// Each write in its own transaction, all answered in one run.
    func write(_ writes: [RecordWrite], _ answered: @escaping @Sendable ([WriteOutcome]) -> Void) -> any Cancellable {
        respond({ (result: Result<[WriteOutcome], TetherError>) in
            switch result {
            case .success(let outcomes): answered(outcomes)
            case .failure(let error): answered(Array(repeating: .failed(error), count: writes.count))
            }
        }) { [self] in writes.map(apply) }
    }

    private func apply(_ write: RecordWrite) -> WriteOutcome {
        guard let (entity, store) = entities[write.spec.route] else {
            return .failed(TetherError(.notFound, "no local store holds \(write.spec.name)"))
        }
        do {
            return try store.withDatabase { database in
                try database.transaction {
                    let current = try store.load(entity, id: write.id, database)?.record
                    var version: Int64?
                    if case .integer(let held)? = current?.values[entity.versionIndex] { version = held }
                    let verdict = write.verdict(holding: version, exists: current != nil)
                    guard verdict == .apply else { return write.outcome(of: verdict, current: current?.fields(of: entity)) }
                    let now = wallClockMilliseconds()
                    if write.kind == .delete {
                        try store.writeRows([], deleting: [write.id], of: entity, fetchedAt: now, database)
                        return .deleted(version: nil)  // a local store's writes take older versions anyway
                    }
                    let base = current.map { $0.fields(of: entity).filter { !$0.key.hasSameBytes(as: entity.spec.idField)
                        && !$0.key.hasSameBytes(as: entity.spec.versionField) } } ?? []
                    let fields: RecordFields = [(entity.spec.idField, .string(write.id)),
                                                (entity.spec.versionField, .integer(Self.nextVersion(after: current?.values[entity.versionIndex])))]
                        + write.applied(to: base).filter { $0.value != .null }
                    let record = try Record(entity: entity, fields: fields)
                    try store.writeRows([record], of: entity, fetchedAt: now, acceptingOlder: true, database)
                    return .written(fields)
                }
            }
        } catch {
            return .failed(TetherError.wrap(error))
        }
    }
}

