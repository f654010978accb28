// Package brokertest holds the Kafka publisher's tests that need kfake in
// process (fault injection with ControlKey, kfake options such as SASL and
// TLS, holding a request) or kadm, as external tests of package kafka in
// kfakeenv's module, not the library's: with module graph pruning every
// requirement of the library's go.mod, test-only ones included, reaches the
// services that import it, and kfake and kadm must not. make test runs them in the
// library lane, and again against Apache Kafka in the real-broker lane.
package brokertest
