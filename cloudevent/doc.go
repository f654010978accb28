// Package cloudevent writes and reads CloudEvents 1.0 in the binary
// content mode of the CloudEvents Kafka protocol binding: [New] builds an
// outbox.Message that carries an [Event] (ce_ headers, the data as the
// record value), ready for a writer; [Parse] reads one from a consumed
// record's headers and value, as package inbox does. Bad input is an
// *outbox.ValidationError; a malformed header an [*Error].
package cloudevent
