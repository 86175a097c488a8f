// libFuzzer target: predicate text, as a host might pass it on from its own
// users, parsed against an entity. Nothing may crash; a predicate that parses
// must select the same rows in SQL over the store as in memory.
@testable import Tether
import Glibc

private let entity: Entity = {
    let spec = Spec(name: "changes", route: "c", idField: "id", versionField: "v",
                    fields: [FieldSpec(name: "User", type: .text), FieldSpec(name: "Change", type: .integer, code: 201),
                             FieldSpec(name: "Score", type: .real), FieldSpec(name: "Open", type: .boolean),
                             FieldSpec(name: "Tags", type: .json), FieldSpec(name: "two words", type: .text)],
                    operations: .all)
    return ModelBuilder.build(specs: [spec], previous: nil).entities[0]
}()

private let records: [Record] = {
    let texts: [JSON] = [.string("alice"), .string("ALÏCE"), .string(""), .string("a*b?"), .string("x\u{0}y"),
                         .string("e\u{301}"), .string("\u{E9}"), .null, .integer(5)]
    let numbers: [JSON] = [.integer(-1), .integer(0), .integer(5), .integer(1 << 60), .real(2.5), .null, .string("5")]
    let booleans: [JSON] = [.bool(true), .bool(false), .null]
    return (0..<60).map { row in
        let fields: RecordFields = [("id", .string("r\(row)")), ("v", .integer(Int64(row))),
                                    ("User", texts[row % texts.count]), ("Change", numbers[row % numbers.count]),
                                    ("Score", numbers[(row / 2) % numbers.count]), ("Open", booleans[row % booleans.count]),
                                    ("Tags", row % 3 == 0 ? .null : .array([.integer(Int64(row))])),
                                    ("two words", texts[(row / 3) % texts.count])]
        return try! Record(entity: entity, fields: fields)
    }
}()

private let store: Store = {
    let store = try! Store(path: ":memory:")
    try! store.adopt(Model(entities: [entity], entityCodeHighWater: entity.code), identity: "fuzz")
    try! store.write(records, of: entity, fetchedAt: 1)
    return store
}()

private let arguments: [Value] = [.text("alice"), .integer(5), .real(2.5), .boolean(true), .null, .text("x\u{0}y")]

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzPredicates(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size > 0 else { return 0 }
    // The first byte says how many arguments are bound; the rest is the text.
    let count = Int(data[0]) % (arguments.count + 1)
    let text = String(decoding: UnsafeBufferPointer(start: data + 1, count: size - 1), as: UTF8.self)
    guard let predicate = try? Predicate.parse(text, entity: entity, arguments: Array(arguments.prefix(count))) else { return 0 }
    let inSQL: Set<String>
    do {
        inSQL = Set(try store.query(entity, where: predicate, sort: [], limit: 0).map(\.record.id))
    } catch {
        fatalError("a parsed predicate failed in SQL: \(error) for \(text.debugDescription)")
    }
    let inMemory = Set(records.filter { predicate.matches($0.values) }.map(\.id))
    require(inSQL == inMemory, "SQL and memory differ for \(text.debugDescription): \(inSQL.symmetricDifference(inMemory))")
    return 0
}
