/// A connection whose server tells it of changes (PostgreSQL's NOTIFY), so
/// live answers follow the server without polling. Contexts sharing the
/// connection (siblings) subscribe each for itself.
public protocol ChangePushing: AnyObject, Sendable {
    /// From now on `subscriber` hears of changes to these entities (by
    /// name), replacing what it heard of before; an empty set ends its
    /// subscription, and the last one ends the listening. `changed` runs on
    /// the connection's listening thread, with no lock of the connection
    /// held: the names of a burst of changes (each once), or every name
    /// subscribed to once the server is reached again after it was lost
    /// (changes may have been missed meanwhile).
    func pushChanges(of entities: Set<String>, to subscriber: ObjectIdentifier,
                     _ changed: @escaping @Sendable (Set<String>) -> Void)
}
