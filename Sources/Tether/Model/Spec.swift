/// A record type as a server describes it, in the server's own words turned
/// into Tether's: what a connection hands the model builder. Nothing here is
/// specific to one server.
public struct Spec: Sendable, Equatable {
    /// The entity's name (a Kinto collection id, a Perforce spec type).
    public var name: String
    /// Where the records live on the server, shown to hosts; the connection
    /// alone interprets it.
    public var route: String
    /// The field that identifies a record ("id" in Kinto).
    public var idField: String
    /// The field holding the server's version of a record ("last_modified").
    public var versionField: String
    /// Every other field, in the server's order. The id and version fields may
    /// appear here too, to give them an explicit code.
    public var fields: [FieldSpec]
    public var operations: Operations

    public init(name: String, route: String, idField: String, versionField: String,
                fields: [FieldSpec], operations: Operations) {
        self.name = name
        self.route = route
        self.idField = idField
        self.versionField = versionField
        self.fields = fields
        self.operations = operations
    }
}

public struct FieldSpec: Sendable, Equatable {
    public var name: String
    public var type: AttributeType
    /// A code the server gives the field; nil lets the model choose one.
    public var code: Int64?
    public var isRequired: Bool
    /// The only values the server accepts; nil: any of the type.
    public var allowedValues: [Value]?
    /// The field names a record of another entity by its id.
    public var reference: Reference?
    /// An `x-tether-delete` that is no rule the model knows (as the schema
    /// wrote it): the builder reports it.
    public var unknownDeleteRule: String? = nil

    public init(name: String, type: AttributeType, code: Int64? = nil, isRequired: Bool = false,
                allowedValues: [Value]? = nil) {
        self.name = name
        self.type = type
        self.code = code
        self.isRequired = isRequired
        self.allowedValues = allowedValues
    }
}

/// What a server says about itself.
public struct ServerInfo: Sendable, Equatable {
    public var name: String
    public var version: String

    public init(name: String, version: String) {
        self.name = name
        self.version = version
    }
}
