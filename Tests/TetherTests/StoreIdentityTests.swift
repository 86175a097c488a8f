import XCTest
@testable import Tether

/// A password in the server URL's user info is a credential: the store
/// never holds it, and a store an earlier version saved with it still opens.
final class StoreIdentityTests: KintoTestCase {
    private func userInfoURL(_ password: String) -> String {
        backend.server.replacingOccurrences(of: "://", with: "://keeper:\(password)@")
    }

    /// Every byte the store's files hold, after the context closed.
    private func storeBytes(_ path: String) -> [UInt8] {
        ["", "-wal", "-journal"].flatMap { suffix in
            FileManager.default.contents(atPath: path + suffix).map { [UInt8]($0) } ?? []
        }
    }

    func testUserInfoNeverReachesTheStore() throws {
        let password = "pw-\(UUID().uuidString)"
        let path = directory + "/userinfo.sqlite"
        let context = try Context.open(ContextOptions(storePath: path),
                                       connection: KintoConnection(KintoOptions(serverURL: userInfoURL(password), bucket: backend.bucket)))
        XCTAssertTrue(context.isOnline)
        XCTAssertNil(try fetch(context, FetchRequest(entity: "items")).last?.error)
        try context.object(entity: "items", id: "i2").set("Title", .text("kept"))
        XCTAssertNil(try SaveContract.save(context).error)
        try context.close()

        let bytes = storeBytes(path)
        XCTAssertFalse(bytes.isEmpty)
        XCTAssertNil(bytes.firstRange(of: Array(password.utf8)), "the password is in the store")
        XCTAssertNil(bytes.firstRange(of: Array("keeper:".utf8)), "the user info is in the store")
    }

    /// A store saved before 0.2, whose identity held the URL as given: it
    /// opens, online and offline, and its identity loses the user info.
    func testAStoreSavedWithUserInfoStillOpens() throws {
        let password = "pw-\(UUID().uuidString)"
        let url = userInfoURL(password)
        let path = directory + "/former.sqlite"
        var context = try Context.open(ContextOptions(storePath: path), connection: KintoConnection(KintoOptions(serverURL: url, bucket: backend.bucket)))
        XCTAssertNil(try fetch(context, FetchRequest(entity: "items")).last?.error)
        try context.close()
        let former = "server \(url), bucket \(backend.bucket)"
        try setIdentity(former, of: path)

        context = try Context.open(ContextOptions(storePath: path), connection: KintoConnection(KintoOptions(serverURL: url, bucket: backend.bucket)))
        XCTAssertTrue(context.isOnline)
        var request = FetchRequest(entity: "items")
        request.policy = .cacheOnly
        XCTAssertEqual(try fetch(context, request).last?.objects.count, itemCount, "the former store's records are there")
        try context.close()
        XCTAssertNil(storeBytes(path).firstRange(of: Array(password.utf8)), "the identity was rewritten")

        // Another server's store is still refused, and its user info not shown.
        try setIdentity("server http://other:\(password)@elsewhere/v1, bucket b", of: path)
        XCTAssertThrowsError(try Context.open(ContextOptions(storePath: path),
                                             connection: KintoConnection(KintoOptions(serverURL: url, bucket: backend.bucket)))) { error in
            let error = error as? TetherError
            XCTAssertEqual(error?.kind, .store)
            XCTAssertFalse(error?.message.contains(password) ?? true, error?.message ?? "")
        }
    }

    private func setIdentity(_ identity: String, of path: String) throws {
        let database = try Database(path: path)
        defer { database.close() }
        try database.statement("UPDATE tether_meta SET value = ? WHERE key = 'identity'").run([.text(identity)])
    }
}
