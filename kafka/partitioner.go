package kafka

import "github.com/twmb/franz-go/pkg/kgo"

// noPartition marks a record whose partition the key partitioner chooses.
// Publish sets Record.Partition to the message's explicit partition, or to
// this, before producing; kgo leaves the field alone until it has partitioned
// the record (then it overwrites it with the partition chosen).
const noPartition = -1

// partitioner honours an explicit partition (Record.Partition >= 0) and
// otherwise defers to the wrapped partitioner (kgo.StickyKeyPartitioner(nil)
// in the Publisher).
type partitioner struct{ inner kgo.Partitioner }

func newPartitioner() kgo.Partitioner {
	return partitioner{kgo.StickyKeyPartitioner(nil)}
}

// ForTopic wraps the inner topic partitioner, forwarding exactly the optional
// interfaces it implements: kgo changes behaviour on their presence (it calls
// PartitionByBackup instead of Partition for TopicBackupPartitioner, and
// rebuffers with OnNewBatch for TopicPartitionerOnNewBatch, which the sticky
// key partitioner uses to rotate keyless records between batches).
func (p partitioner) ForTopic(topic string) kgo.TopicPartitioner {
	inner := p.inner.ForTopic(topic)
	base := topicPartitioner{inner}
	onNew, hasOnNew := inner.(kgo.TopicPartitionerOnNewBatch)
	backup, hasBackup := inner.(kgo.TopicBackupPartitioner)
	switch {
	case hasOnNew && hasBackup:
		return topicPartitionerOnNewBackup{topicPartitionerBackup{base, backup}, onNew}
	case hasOnNew:
		return topicPartitionerOnNew{base, onNew}
	case hasBackup:
		return topicPartitionerBackup{base, backup}
	default:
		return base
	}
}

type topicPartitioner struct{ inner kgo.TopicPartitioner }

// RequiresConsistency is true for an explicit partition: the record must go
// to that partition even while it has no leader (it waits, as a keyed record
// does).
func (p topicPartitioner) RequiresConsistency(r *kgo.Record) bool {
	return r.Partition >= 0 || p.inner.RequiresConsistency(r)
}

// Partition returns the explicit partition when there is one. kgo partitions a
// consistency-requiring record among all of the topic's partitions, indexed by
// partition number, so the index is the partition. An explicit partition the
// topic does not have makes kgo fail the record ("invalid record partitioning
// choice").
func (p topicPartitioner) Partition(r *kgo.Record, n int) int {
	if r.Partition >= 0 {
		return int(r.Partition)
	}
	return p.inner.Partition(r, n)
}

type topicPartitionerOnNew struct {
	topicPartitioner
	onNew kgo.TopicPartitionerOnNewBatch
}

func (p topicPartitionerOnNew) OnNewBatch() { p.onNew.OnNewBatch() }

type topicPartitionerBackup struct {
	topicPartitioner
	backup kgo.TopicBackupPartitioner
}

func (p topicPartitionerBackup) PartitionByBackup(r *kgo.Record, n int, it kgo.TopicBackupIter) int {
	if r.Partition >= 0 {
		return int(r.Partition)
	}
	return p.backup.PartitionByBackup(r, n, it)
}

type topicPartitionerOnNewBackup struct {
	topicPartitionerBackup
	onNew kgo.TopicPartitionerOnNewBatch
}

func (p topicPartitionerOnNewBackup) OnNewBatch() { p.onNew.OnNewBatch() }
