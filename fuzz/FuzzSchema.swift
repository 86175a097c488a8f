// libFuzzer target: a Kinto collection listing, as bytes, into specs, a
// model and a store. Nothing may crash; the model keeps its promises: names
// usable and distinct, codes in range and unique, codes stable when the
// model is built again from itself or from what the store saved.
@testable import Tether
import Glibc

private func checkPromises(_ model: Model) {
    var entityNames = Set<ExactString>(), entityCodes = Set<Int>()
    for (index, entity) in model.entities.enumerated() {
        require(entity.index == index && Identifier.isUsableName(entity.name), "entity \(index)")
        require(entityNames.insert(ExactString(entity.name)).inserted, "entity name twice")
        require(entity.code > 0 && entityCodes.insert(entity.code).inserted, "entity code \(entity.code)")
        require(entity.code <= model.entityCodeHighWater, "entity code above the high water")
        var names = Set<ExactString>(), codes = Set<Int>()
        for attribute in entity.attributes {
            require(Identifier.isUsableName(attribute.name), "attribute name")
            require(names.insert(ExactString(attribute.name)).inserted, "attribute name twice")
            require((1...ModelBuilder.largestCode).contains(attribute.code) && codes.insert(attribute.code).inserted,
                         "attribute code \(attribute.code)")
            require(attribute.code <= entity.codeHighWater, "attribute code above the high water")
            require(entity.attributeIndex(named: attribute.name).map { entity.attributes[$0].code } == attribute.code)
        }
        require(entity.attributes[entity.idIndex].isID && entity.attributes[entity.versionIndex].isVersion)
    }
}

private func codes(_ model: Model) -> [[Int]] { model.entities.map { [$0.code] + $0.attributes.map(\.code) } }

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzSchema(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard let document = try? JSONReader.parse(UnsafeBufferPointer(start: data, count: size)) else { return 0 }
    // A saved model, as a store file anyone may have written holds it: read
    // back and built upon, it must keep the same promises.
    if document["format"] != nil {
        guard let saved = try? ModelCoding.decode(document.serialized()) else { return 0 }
        checkPromises(saved)
        let specs = saved.entities.map(\.spec) + [Spec(name: "new", route: "n", idField: "id", versionField: "v",
                                                       fields: [FieldSpec(name: "f", type: .text)], operations: .all)]
        let built = ModelBuilder.build(specs: specs, previous: saved)
        checkPromises(built)
        for entity in saved.entities {
            require(built.entity(named: entity.name)?.attributes.map(\.code) == entity.attributes.map(\.code), "codes moved")
        }
        return 0
    }
    let collections = document["data"]?.arrayValue ?? document.arrayValue ?? [document]
    let specs = collections.map { KintoConnection.spec(from: $0, bucket: "b", operations: .all) }
    let model = ModelBuilder.build(specs: specs, previous: nil)
    checkPromises(model)

    // What the store saves reads back as the same model.
    guard let store = try? Store(path: ":memory:") else { fatalError("no in-memory store") }
    defer { store.close() }
    do { try store.adopt(model, identity: "fuzz") } catch { fatalError("the store refused the model: \(error)") }
    guard let saved = try? store.savedModel(identity: "fuzz") else { fatalError("the saved model did not read back") }
    require(codes(saved) == codes(model), "the saved model's codes differ")

    // Built again on itself, nothing moves.
    let again = ModelBuilder.build(specs: specs, previous: saved)
    checkPromises(again)
    require(codes(again) == codes(model), "codes moved when the model was built again")

    // Without every other field, the rest keep their codes; with them back,
    // every code given before is kept.
    let fewer = specs.map { spec -> Spec in
        var spec = spec
        spec.fields = spec.fields.enumerated().filter { $0.offset % 2 == 0 }.map(\.element)
        return spec
    }
    let thinned = ModelBuilder.build(specs: fewer, previous: again)
    checkPromises(thinned)
    let restored = ModelBuilder.build(specs: specs, previous: thinned)
    checkPromises(restored)
    for entity in thinned.entities {
        let before = again.entity(named: entity.name)!, after = restored.entity(named: entity.name)!
        require(entity.code == before.code && after.code == before.code, "entity code moved")
        for attribute in entity.attributes {
            let code = { (model: Entity) in model.attributeIndex(named: attribute.name).map { model.attributes[$0].code } }
            require(code(before) == attribute.code && code(after) == attribute.code, "code of \(attribute.name) moved")
        }
    }
    do { try store.adopt(restored, identity: "fuzz") } catch { fatalError("the store refused a migration: \(error)") }
    return 0
}
