// libFuzzer target: a server's listing page, as bytes, through the JSON
// reader, into records of an entity, into the store and back. Nothing may
// crash, and nothing the server sent may be lost on the way.
@testable import Tether
import Glibc

private let entity: Entity = {
    let spec = Spec(name: "items", route: "items", idField: "id", versionField: "last_modified",
                    fields: [FieldSpec(name: "title", type: .text), FieldSpec(name: "rank", type: .integer),
                             FieldSpec(name: "score", type: .real), FieldSpec(name: "done", type: .boolean),
                             FieldSpec(name: "data", type: .json), FieldSpec(name: "caf\u{E9}", type: .text),
                             FieldSpec(name: "cafe\u{301}", type: .integer)],
                    operations: .all)
    return ModelBuilder.build(specs: [spec], previous: nil).entities[0]
}()

private let store: Store = {
    let store = try! Store(path: ":memory:")
    try! store.adopt(Model(entities: [entity], entityCodeHighWater: entity.code), identity: "fuzz")
    return store
}()

/// The JSON a typed value stands for, to compare with what the server sent.
private func json(_ value: Value) -> JSON {
    switch value {
    case .null: return .null
    case .text(let s): return .string(s)
    case .integer(let i): return .integer(i)
    case .real(let d): return .real(d)
    case .boolean(let b): return .bool(b)
    case .json(let text): return try! JSON.parse(text)
    }
}

/// A record's version as its integer column holds it; nil: NULL there.
private func version(_ record: Record) -> Int64? {
    if case .integer(let version) = record.values[entity.versionIndex] { return version }
    return nil
}

private func same(_ sent: JSON, _ kept: JSON) -> Bool {
    if case .integer(let i) = sent, case .real(let d) = kept { return Int64(exactly: d) == i }
    // A JSON attribute's objects are stored with sorted keys: order is not
    // part of a JSON object's meaning.
    return sent.serialized(sortKeys: true) == kept.serialized(sortKeys: true)
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzRecords(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard let document = try? JSONReader.parse(UnsafeBufferPointer(start: data, count: size)) else { return 0 }
    // What is written reads back the same, and sorted keys are canonical.
    let text = document.serialized()
    guard let reread = try? JSON.parse(text), reread == document else { fatalError("serialization does not round-trip: \(text)") }
    require(reread.serialized(sortKeys: true) == document.serialized(sortKeys: true))

    var latest: [ExactString: Record] = [:]
    var records: [Record] = []
    for item in document["data"]?.arrayValue ?? [] {
        guard let fields = item.objectValue, let record = try? Record(entity: entity, fields: fields) else { continue }
        // Every field is in its attribute, or kept whole among the extra fields.
        for field in fields {
            let kept = entity.attributeIndex(named: field.key).map { json(record.values[$0]) }
            let inExtra = record.extra.first { $0.key.utf8.elementsEqual(field.key.utf8) }?.value
            if let inExtra, inExtra == field.value { continue }
            guard let kept, inExtra == nil, same(field.value, kept) else {
                fatalError("field \(field.key.debugDescription) = \(field.value.serialized()) was not kept")
            }
        }
        records.append(record)
        // The store keeps the newest version of an id named twice (the later
        // one on a tie, or where either has no integer version).
        if let kept = latest[ExactString(record.id)], let keptVersion = version(kept), let newVersion = version(record),
           newVersion < keptVersion { continue }
        latest[ExactString(record.id)] = record
    }
    do {
        try store.write(records, of: entity, fetchedAt: 1)
    } catch {
        fatalError("the store refused records: \(error)")
    }
    for (id, record) in latest {
        guard let loaded = try? store.load(entity, id: id.string)?.record else { fatalError("record \(id.string.debugDescription) was not stored") }
        guard loaded.values == record.values, JSON.object(loaded.extra) == JSON.object(record.extra) else {
            fatalError("record \(id.string.debugDescription) did not read back the same")
        }
    }
    try? store.delete(ids: latest.keys.map(\.string), of: entity)
    // Their tombstones too: the next input's records, whatever their
    // versions, are news (a record no newer than a deletion is not taken).
    try? store.withDatabase { try $0.execute("DELETE FROM tether_deleted") }
    return 0
}
