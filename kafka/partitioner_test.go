package kafka

import (
	"testing"

	"github.com/dynakafka/outbox"
	"github.com/twmb/franz-go/pkg/kgo"
)

// fakeTopicPartitioner records what was called; it returns 1 from Partition
// and 2 from PartitionByBackup.
type fakeTopicPartitioner struct {
	consistent bool
	onNewBatch *int
}

func (f fakeTopicPartitioner) RequiresConsistency(*kgo.Record) bool { return f.consistent }
func (fakeTopicPartitioner) Partition(*kgo.Record, int) int         { return 1 }

type fakeOnNew struct{ fakeTopicPartitioner }

func (f fakeOnNew) OnNewBatch() { *f.onNewBatch++ }

type fakeBackup struct{ fakeTopicPartitioner }

func (fakeBackup) PartitionByBackup(*kgo.Record, int, kgo.TopicBackupIter) int { return 2 }

type fakeBoth struct{ fakeTopicPartitioner }

func (f fakeBoth) OnNewBatch()                                               { *f.onNewBatch++ }
func (fakeBoth) PartitionByBackup(*kgo.Record, int, kgo.TopicBackupIter) int { return 2 }

type fakePartitioner struct{ tp kgo.TopicPartitioner }

func (f fakePartitioner) ForTopic(string) kgo.TopicPartitioner { return f.tp }

func TestPartitionerForwardsOptionalInterfaces(t *testing.T) {
	calls := new(int)
	base := fakeTopicPartitioner{onNewBatch: calls}
	tests := []struct {
		name                  string
		inner                 kgo.TopicPartitioner
		wantOnNew, wantBackup bool
	}{
		{"plain", base, false, false},
		{"on new batch", fakeOnNew{base}, true, false},
		{"backup", fakeBackup{base}, false, true},
		{"both", fakeBoth{base}, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp := partitioner{fakePartitioner{tt.inner}}.ForTopic("t")
			onNew, hasOnNew := tp.(kgo.TopicPartitionerOnNewBatch)
			backup, hasBackup := tp.(kgo.TopicBackupPartitioner)
			if hasOnNew != tt.wantOnNew || hasBackup != tt.wantBackup {
				t.Fatalf("OnNewBatch %v, backup %v; want %v, %v", hasOnNew, hasBackup, tt.wantOnNew, tt.wantBackup)
			}
			if hasOnNew {
				before := *calls
				onNew.OnNewBatch()
				if *calls != before+1 {
					t.Error("OnNewBatch was not forwarded")
				}
			}
			keyed := &kgo.Record{Key: []byte("k"), Partition: noPartition}
			pinned := &kgo.Record{Key: []byte("k"), Partition: 4}
			if got := tp.Partition(keyed, 8); got != 1 {
				t.Errorf("Partition(keyed) = %d, want the inner partitioner's 1", got)
			}
			if got := tp.Partition(pinned, 8); got != 4 {
				t.Errorf("Partition(pinned to 4) = %d", got)
			}
			if !tp.RequiresConsistency(pinned) {
				t.Error("a pinned record must require consistency")
			}
			if tp.RequiresConsistency(keyed) {
				t.Error("RequiresConsistency(keyed) not forwarded (the fake says false)")
			}
			if hasBackup {
				if got := backup.PartitionByBackup(keyed, 8, nil); got != 2 {
					t.Errorf("PartitionByBackup(keyed) = %d, want the inner partitioner's 2", got)
				}
				if got := backup.PartitionByBackup(pinned, 8, nil); got != 4 {
					t.Errorf("PartitionByBackup(pinned to 4) = %d", got)
				}
			}
		})
	}
}

// The publisher's partitioner keeps what kgo's sticky key partitioner
// implements, and places keys exactly as outbox.BucketForKey.
func TestPartitionerMatchesBucketForKey(t *testing.T) {
	tp := newPartitioner().ForTopic("t")
	if _, ok := tp.(kgo.TopicPartitionerOnNewBatch); !ok {
		t.Error("the sticky key partitioner's OnNewBatch is not forwarded")
	}
	if _, ok := tp.(kgo.TopicBackupPartitioner); ok {
		t.Error("the wrapper claims TopicBackupPartitioner, which the sticky key partitioner does not implement")
	}
	keys := [][]byte{{}, []byte("a"), []byte("order-1"), []byte("日本"), {0, 0, 0, 0, 0}}
	for _, n := range []int{1, 3, 7, 8, 64} {
		for _, key := range keys {
			r := &kgo.Record{Key: key, Partition: noPartition}
			if !tp.RequiresConsistency(r) {
				t.Errorf("key %x does not require consistency", key)
			}
			if got, want := tp.Partition(r, n), outbox.BucketForKey(key, n); got != want {
				t.Errorf("key %x over %d partitions: %d, outbox.BucketForKey says %d", key, n, got, want)
			}
		}
	}
	if tp.RequiresConsistency(&kgo.Record{Partition: noPartition}) {
		t.Error("a keyless record requires consistency")
	}
}
