/// What a fetch answers: objects, ids, chosen values, or a count.
public enum ResultType: Sendable, Equatable {
    /// Objects, each with its values.
    case objects
    /// Ids only: no values are read; an object is made when asked for.
    case ids
    /// How many records match (after offset, at most limit); no rows.
    case count
    /// The request's `properties` of each record, without making objects.
    case values
}

/// One phase's answer, in result order. Rows are counted by `count`; each
/// row has an id, and an object on demand (made from its id, so the context
/// keeps one object per record). With a batch size, an answer from the cache
/// holds only its rows' rowids (4 or 8 bytes a row: the order and count of
/// the fetch), others their ids compactly; objects or values are read from
/// the store a batch at a time around the row asked for, and only that batch
/// is held, so iterating a large answer keeps memory flat. A row read by
/// rowid whose record was deleted from the store since the fetch is
/// TetherError `.notFound`.
public final class FetchedResults: Sendable {
    public let type: ResultType
    /// Rows; for `.count`, the count.
    public let count: Int
    /// Attribute indexes of `values`' columns.
    public let properties: [Int]
    /// 0, or how many objects or values rows are read (and held) at a time.
    public let batchSize: Int
    /// For a live fetch's answers after its first: how it moved.
    public let changes: ResultChanges?
    private let rows: Rows
    private let context: Context?
    private let entity: Entity?
    private let window = Lock(Window())

    private enum Rows: Sendable {
        case none
        case objects([ManagedObject])
        /// Objects made when asked for (a batch at a time with a batch size).
        case ids(IDList)
        case values(ids: [String], values: [[Value]])
        /// Values read a batch at a time.
        case batchedValues(IDList)
        /// The cache's rows by rowid: objects (`.objects`) or values read a batch at a time.
        case rowids(RowIDList)
    }

    /// A row of a batch of objects read by rowid. A struct, not a tuple:
    /// letting a batch go then frees each row with code made for it, not
    /// the runtime's generic walk of a tuple.
    private struct HeldRow {
        let id: String
        let object: ManagedObject
    }

    /// The batch held: from row `start`, its objects or values rows.
    private struct Window {
        var start = 0
        var objects: [ManagedObject] = []
        var values: [[Value]?] = []
        /// Objects by rowid: each row's, nil for a row gone since the fetch.
        var rows: [HeldRow?] = []
        /// Values by rowid.
        var block = ValuesBlock()
    }

    private init(type: ResultType, count: Int, rows: Rows, context: Context?, entity: Entity?, properties: [Int] = [],
                 batchSize: Int = 0, changes: ResultChanges? = nil) {
        self.changes = changes
        self.type = type
        self.count = count
        self.rows = rows
        self.context = context
        self.entity = entity
        self.properties = properties
        self.batchSize = batchSize
    }

    /// No rows (a count of 0), of `type`: a cancelled or failed fetch's answer.
    static func empty(_ type: ResultType) -> FetchedResults {
        FetchedResults(type: type, count: 0, rows: .none, context: nil, entity: nil)
    }

    static func counted(_ count: Int) -> FetchedResults {
        FetchedResults(type: .count, count: count, rows: .none, context: nil, entity: nil)
    }

    static func objects(_ objects: [ManagedObject]) -> FetchedResults {
        FetchedResults(type: .objects, count: objects.count, rows: .objects(objects), context: nil, entity: nil)
    }

    /// Ids whose objects are made when asked for, `batchSize` at a time (0: one at a time).
    static func ids(_ ids: IDList, type: ResultType, context: Context, entity: Entity, batchSize: Int) -> FetchedResults {
        FetchedResults(type: type, count: ids.count, rows: .ids(ids), context: context, entity: entity, batchSize: batchSize)
    }

    static func values(_ ids: [String], _ values: [[Value]], properties: [Int], context: Context, entity: Entity)
        -> FetchedResults {
        FetchedResults(type: .values, count: ids.count, rows: .values(ids: ids, values: values), context: context,
                       entity: entity, properties: properties)
    }

    /// The cache's rows by rowid, read `batchSize` at a time (`batchSize` > 0).
    static func rowids(_ rowids: RowIDList, type: ResultType, properties: [Int] = [], context: Context, entity: Entity,
                       batchSize: Int) -> FetchedResults {
        precondition(batchSize > 0 && (type == .objects || type == .values), "rows by rowid are read in batches")
        return FetchedResults(type: type, count: rowids.count, rows: .rowids(rowids), context: context, entity: entity,
                              properties: properties, batchSize: batchSize)
    }

    /// Values read from the store `batchSize` rows at a time.
    static func batchedValues(_ ids: IDList, properties: [Int], context: Context, entity: Entity, batchSize: Int)
        -> FetchedResults {
        FetchedResults(type: .values, count: ids.count, rows: .batchedValues(ids), context: context, entity: entity,
                       properties: properties, batchSize: batchSize)
    }

    /// The same answer, telling how it moved.
    func with(_ changes: ResultChanges) -> FetchedResults {
        FetchedResults(type: type, count: count, rows: rows, context: context, entity: entity, properties: properties,
                       batchSize: batchSize, changes: changes)
    }

    /// Every row's id, in order (none for a count).
    var allIDs: [ExactString] {
        switch rows {
        case .none: return []
        case .objects(let objects): return objects.map { ExactString($0.id) }
        case .ids(let ids), .batchedValues(let ids): return (0..<ids.count).map { ExactString(ids[$0]) }
        case .values(let ids, _): return ids.map(ExactString.init)
        case .rowids(let rowids):
            // Rows gone since the fetch have no id left: they are not in it.
            guard let context, let entity else { return [] }
            let all = rowids.slice(0..<rowids.count)
            guard let found = try? context.store(for: entity).ids(entity, rowids: all) else { return [] }
            return found.compactMap { $0.map(ExactString.init) }
        }
    }

    public func id(at index: Int) throws -> String {
        try checkIndex(index)
        switch rows {
        case .none: throw TetherError(.misuse, "a count has no rows")
        case .objects(let objects): return objects[index].id
        case .ids(let ids), .batchedValues(let ids): return ids[index]
        case .values(let ids, _): return ids[index]
        case .rowids(let rowids):
            guard type == .values else { return try row(index, rowids).id }
            return try valuesRow(index, rowids) { block, row in block.ids[row]! }
        }
    }

    /// The row's object. With a batch size, reading a row outside the held
    /// batch reads its batch and lets the previous one go.
    public func object(at index: Int) throws -> ManagedObject {
        try checkIndex(index)
        switch rows {
        case .none: throw TetherError(.misuse, "a count has no objects")
        case .objects(let objects): return objects[index]
        case .values(let ids, _): return try made([ids[index]])[0]
        case .batchedValues(let ids): return try made([ids[index]])[0]
        case .rowids(let rowids):
            guard type == .values else { return try row(index, rowids).object }
            return try made([id(at: index)])[0]
        case .ids(let ids):
            guard batchSize > 0 else { return try made([ids[index]])[0] }
            if let held = window.withLock({ window in
                index >= window.start && index < window.start + window.objects.count ? window.objects[index - window.start] : nil
            }) { return held }
            let range = batch(around: index)
            let objects = try made(ids.slice(range), reading: true)
            window.withLock { $0 = Window(start: range.lowerBound, objects: objects) }
            return objects[index - range.lowerBound]
        }
    }

    /// The objects of rows `range`: those made on demand without a batch
    /// size are made in one pass (one graph lock per slice, not per object).
    public func objects(in range: Range<Int>) throws -> [ManagedObject] {
        guard case .ids(let ids) = rows, batchSize == 0, !range.isEmpty else { return try range.map { try object(at: $0) } }
        try checkIndex(range.lowerBound)
        try checkIndex(range.upperBound - 1)
        return try made(ids.slice(range))
    }

    /// A `.values` row's value of the `column`th property. With a batch
    /// size, TetherError `.notFound` for a row deleted since the fetch.
    public func value(at index: Int, column: Int) throws -> Value {
        try checkIndex(index)
        guard type == .values else {
            throw TetherError(.misuse, "only a values fetch has values: read an object's with peek")
        }
        guard column >= 0, column < properties.count else {
            throw TetherError(.notFound, "no property \(column) in these values")
        }
        switch rows {
        case .values(_, let values): return values[index][column]
        case .rowids(let rowids):
            return try valuesRow(index, rowids) { block, row in block[row, column] }
        case .batchedValues(let ids):
            // Outer nil: not in the held batch; inner nil: the row is gone.
            let held = window.withLock { window -> [Value]?? in
                guard index >= window.start, index < window.start + window.values.count else { return .none }
                return .some(window.values[index - window.start])
            }
            let row: [Value]?
            if let held {
                row = held
            } else {
                let range = batch(around: index)
                let batchIDs = ids.slice(range)
                let rows = try visibleValues(batchIDs)
                let values = batchIDs.map { rows[ExactString($0)] }
                window.withLock { $0 = Window(start: range.lowerBound, values: values) }
                row = values[index - range.lowerBound]
            }
            guard let row else { throw TetherError(.notFound, "row \(index) was deleted since the fetch") }
            return row[column]
        default:
            throw TetherError(.misuse, "only a values fetch has values: read an object's with peek")
        }
    }

    /// The column of `values` holding the attribute of that name.
    public func column(named name: String) -> Int? {
        guard let entity, let index = entity.attributeIndex(named: name) else { return nil }
        return properties.firstIndex(of: index)
    }

    /// `column(named:)` for a name's UTF-8 bytes (a C string's), found in
    /// place where the entity allows (no String made per row read).
    public func column(bytes name: UnsafeBufferPointer<UInt8>) -> Int? {
        if let entity, let index = entity.attributeIndex(bytes: name) { return properties.firstIndex(of: index) }
        return String(validating: name, as: UTF8.self).flatMap(column(named:))
    }

    /// Every object, made now: for small answers and tests.
    public var objects: [ManagedObject] {
        if case .objects(let objects) = rows { return objects }
        return (0..<(type == .count ? 0 : count)).compactMap { try? object(at: $0) }
    }

    private func checkIndex(_ index: Int) throws {
        guard index >= 0, index < count, type != .count else { throw TetherError(.notFound, "no row at index \(index)") }
    }

    private func batch(around index: Int) -> Range<Int> {
        let start = index - index % batchSize
        return start..<min(count, start + batchSize)
    }

    /// Row `index` of a rowid answer of objects: from the held batch, else its batch
    /// read now (the previous one let go). `.notFound` for a row gone.
    private func row(_ index: Int, _ rowids: RowIDList) throws -> HeldRow {
        let held = window.withLock { window -> HeldRow?? in
            guard index >= window.start, index < window.start + window.rows.count else { return .none }
            return .some(window.rows[index - window.start])
        }
        let row: HeldRow?
        if let held {
            row = held
        } else {
            let range = batch(around: index)
            let rows = try readRows(rowids.slice(range))
            window.withLock { $0 = Window(start: range.lowerBound, rows: rows) }
            row = rows[index - range.lowerBound]
        }
        guard let row else { throw TetherError(.notFound, "row \(index) was deleted since the fetch") }
        return row
    }

    /// Row `index` of a rowid answer of values, given to `read` with its
    /// batch: the held one, else its batch read now (the previous one let
    /// go). `.notFound` for a row gone.
    private func valuesRow<T>(_ index: Int, _ rowids: RowIDList, _ read: (ValuesBlock, Int) -> T) throws -> T {
        // Outer nil: not in the held batch; inner nil: the row is gone.
        let held = window.withLock { window -> T?? in
            let row = index - window.start
            guard row >= 0, row < window.block.count else { return .none }
            return .some(window.block.ids[row] == nil ? nil : read(window.block, row))
        }
        if let held {
            guard let held else { throw TetherError(.notFound, "row \(index) was deleted since the fetch") }
            return held
        }
        let range = batch(around: index)
        guard let context, let entity else { throw TetherError(.internal, "results without a context") }
        try context.checkReadable()
        let block = visibleValues(try context.store(for: entity).values(entity, rowids: rowids.slice(range), attributes: properties),
                                  context, entity)
        window.withLock { $0 = Window(start: range.lowerBound, block: block) }
        let row = index - range.lowerBound
        guard block.ids[row] != nil else { throw TetherError(.notFound, "row \(index) was deleted since the fetch") }
        return read(block, row)
    }

    /// The objects at `rowids`, their rows taken into memory in one
    /// uniquing pass; nil for a row gone.
    private func readRows(_ rowids: [Int64]) throws -> [HeldRow?] {
        guard let context, let entity else { throw TetherError(.internal, "results without a context") }
        try context.checkReadable()
        let stored = try context.store(for: entity).rows(entity, rowids: rowids)
        var objects = context.adopt(stored.compactMap { $0 }, of: entity).makeIterator()
        return stored.map { row in
            row == nil ? nil : objects.next().map { HeldRow(id: $0.id, object: $0) }
        }
    }

    /// Values rows read by rowid, as the host sees them (unsaved changes included).
    private func visibleValues(_ stored: ValuesBlock, _ context: Context, _ entity: Entity) -> ValuesBlock {
        let pending = pendingValues(context, entity)
        guard !pending.isEmpty else { return stored }
        var block = stored
        for row in 0..<block.count {
            if let id = block.ids[row], let change = pending[ExactString(id)] { block.replace(row, with: change) }
        }
        return block
    }

    /// The values rows of these ids as the host sees them: stored, or an
    /// unsaved insert or edit; absent if not stored, or deleted here.
    private func visibleValues(_ ids: [String]) throws -> [ExactString: [Value]] {
        guard let context, let entity else { throw TetherError(.internal, "results without a context") }
        try context.checkReadable()
        var rows = try context.store(for: entity).values(entity, ids: ids, attributes: properties)
        let pending = pendingValues(context, entity)
        guard !pending.isEmpty else { return rows }
        for id in ids.map(ExactString.init) {
            if let change = pending[id] { rows[id] = change }  // nil: deleted here, absent
        }
        return rows
    }

    /// The unsaved changes as this answer's values rows, by id: an insert's
    /// or edit's values, nil for a delete.
    private func pendingValues(_ context: Context, _ entity: Entity) -> [ExactString: [Value]?] {
        var pending: [ExactString: [Value]?] = [:]
        for row in context.pendingRows(entity) {
            let values: [Value]? = row.visible.map { values in properties.map { values[$0] } }
            pending[ExactString(row.object.id)] = .some(values)  // a delete's nil is kept, not a removal
        }
        return pending
    }

    /// The objects of `ids`; with `reading`, their rows are read from the
    /// store in one query, so the batch's peeks need none.
    private func made(_ ids: [String], reading: Bool = false) throws -> [ManagedObject] {
        guard let context, let entity else { throw TetherError(.internal, "results without a context") }
        try context.checkReadable()
        guard reading else { return context.uniqueObjects(entity, ids) }
        let stored = try context.store(for: entity).rows(entity, ids: ids)
        // One uniquing pass: adopt makes the stored rows' objects, the rest are made after.
        let adopted = context.adopt(ids.compactMap { stored[ExactString($0)] }, of: entity)
        guard adopted.count < ids.count else { return adopted }
        let missing = context.uniqueObjects(entity, ids.filter { stored[ExactString($0)] == nil })
        var fromStore = adopted.makeIterator(), others = missing.makeIterator()
        return ids.map { stored[ExactString($0)] != nil ? fromStore.next()! : others.next()! }
    }
}

extension Context {
    /// changedObjects as a fetch's answer, for a host that reads answers.
    public var changedObjectsResults: FetchedResults { .objects(changedObjects) }
}
