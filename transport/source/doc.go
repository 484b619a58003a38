// Package source reads records from NATS for a job's source tasks: Core
// from a core NATS subject (at-most-once), JetStream from a stream
// (replayable from a checkpointed offset). Each gathers the messages that
// arrived since the last Poll into one record batch. A record's value is
// the message's data; its key is the Weir-Key header (KeyHeader) or, with
// KeyFromSubject, the message's subject; its timestamp is the Weir-Time
// header (TimeHeader: the event's time, milliseconds since the Unix
// epoch), else the time the stream stored the message (JetStream) or the
// source took it (core).
package source
