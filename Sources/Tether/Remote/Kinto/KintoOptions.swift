/// How to reach one bucket of a Kinto server.
public struct KintoOptions: Sendable {
    public var serverURL: String
    public var bucket: String
    public var username: String?
    public var password: String?
    public var timeoutMilliseconds: Int64 = 30_000

    public init(serverURL: String, bucket: String) {
        self.serverURL = serverURL
        self.bucket = bucket
    }
}
