// Command baseline is kubecast's comparison point in the end-to-end benchmarks (bench/run):
// a bridge written the way most tools are written today. A client-go SharedInformer per
// resource (Pods by default; -resources adds nodes, deployments, replicasets and core events)
// calls handlers that build a CloudEvent with the CloudEvents Go SDK (a random id, the object
// without managedFields marshalled as data) and produce it to Kafka, either with franz-go
// (asynchronous, binary mode: ce_ headers) or with the SDK's own sarama sender. Every
// resource goes to the one topic, unless the topic holds {resource}.
//
// usage: baseline -kubeconfig F -namespace NS -brokers B -topic T [-sender franz|sarama]
//
//	[-resources pods,nodes,deployments,replicasets,events]
//
// It prints "synced" once the informers' caches hold the initial lists, and on SIGTERM
// flushes what it has produced and exits.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/cloudevents/sdk-go/protocol/kafka_sarama/v2"
	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

type sender interface {
	send(ctx context.Context, e cloudevents.Event, key, topic string)
	close()
}

// franzSender produces asynchronously; the record's headers are the event's attributes
// (CloudEvents Kafka binding, binary mode).
type franzSender struct {
	client *kgo.Client
}

func (s *franzSender) send(ctx context.Context, e cloudevents.Event, key, topic string) {
	headers := []kgo.RecordHeader{
		{Key: "ce_specversion", Value: []byte(e.SpecVersion())},
		{Key: "ce_id", Value: []byte(e.ID())},
		{Key: "ce_source", Value: []byte(e.Source())},
		{Key: "ce_type", Value: []byte(e.Type())},
		{Key: "ce_subject", Value: []byte(e.Subject())},
		{Key: "ce_time", Value: []byte(e.Time().Format(time.RFC3339Nano))},
		{Key: "content-type", Value: []byte(e.DataContentType())},
	}
	for name, value := range e.Extensions() {
		headers = append(headers, kgo.RecordHeader{Key: "ce_" + name, Value: []byte(fmt.Sprint(value))})
	}
	record := &kgo.Record{Topic: topic, Key: []byte(key), Value: e.Data(), Headers: headers}
	s.client.Produce(ctx, record, func(_ *kgo.Record, err error) {
		if err != nil {
			log.Printf("produce: %v", err)
		}
	})
}

func (s *franzSender) close() {
	if err := s.client.Flush(context.Background()); err != nil {
		log.Printf("flush: %v", err)
	}
	s.client.Close()
}

// saramaSender is the SDK's Kafka protocol: a client whose Send returns when the broker
// acknowledged the event.
type saramaSender struct {
	client cloudevents.Client
	sender *kafka_sarama.Sender
}

func (s *saramaSender) send(ctx context.Context, e cloudevents.Event, key, _ string) {
	ctx = kafka_sarama.WithMessageKey(ctx, sarama.StringEncoder(key))
	if result := s.client.Send(ctx, e); cloudevents.IsUndelivered(result) {
		log.Printf("send: %v", result)
	}
}

func (s *saramaSender) close() { _ = s.sender.Close(context.Background()) }

func newSender(kind, brokers, topic string) (sender, error) {
	switch kind {
	case "franz":
		client, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.RequiredAcks(kgo.AllISRAcks()),
			kgo.AllowAutoTopicCreation())
		if err != nil {
			return nil, err
		}
		return &franzSender{client: client}, nil
	case "sarama":
		config := sarama.NewConfig()
		config.Version = sarama.V2_8_0_0
		config.Producer.RequiredAcks = sarama.WaitForAll
		s, err := kafka_sarama.NewSender([]string{brokers}, config, topic)
		if err != nil {
			return nil, err
		}
		client, err := cloudevents.NewClient(s)
		if err != nil {
			return nil, err
		}
		return &saramaSender{client: client, sender: s}, nil
	}
	return nil, fmt.Errorf("unknown sender %q (franz or sarama)", kind)
}

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file")
	namespace := flag.String("namespace", "", "namespace to watch (empty: all)")
	brokers := flag.String("brokers", "127.0.0.1:9092", "Kafka bootstrap address")
	topic := flag.String("topic", "baseline.pods", "Kafka topic")
	senderKind := flag.String("sender", "franz", "franz (async) or sarama (the SDK's sender)")
	cluster := flag.String("cluster", "bench", "cluster name in the events' source")
	resources := flag.String("resources", "pods", "resources to watch: pods, nodes, deployments, replicasets, events")
	flag.Parse()

	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		log.Fatalf("kubeconfig: %v", err)
	}
	clientset, err := kubernetes.NewForConfig(config)
	if err != nil {
		log.Fatalf("client: %v", err)
	}
	out, err := newSender(*senderKind, *brokers, *topic)
	if err != nil {
		log.Fatalf("sender: %v", err)
	}
	ctx := context.Background()
	// emit sends one change of an object of `resource` (its group and version in `gv`).
	emit := func(resource, gv, change string, obj runtime.Object) {
		obj = obj.DeepCopyObject() // the informer's cache must not be changed
		m, err := meta.Accessor(obj)
		if err != nil {
			log.Printf("object: %v", err)
			return
		}
		m.SetManagedFields(nil)
		kind := strings.TrimSuffix(resource, "s")
		e := cloudevents.NewEvent()
		e.SetID(uuid.NewString())
		path := "/api/" + gv
		if gv != "v1" {
			path = "/apis/" + gv
		}
		if ns := m.GetNamespace(); ns != "" {
			path += "/namespaces/" + ns
			e.SetSubject(ns + "/" + m.GetName())
		} else {
			e.SetSubject(m.GetName())
		}
		e.SetSource(fmt.Sprintf("k8s://%s%s/%s", *cluster, path, resource))
		e.SetType("io.k8s." + strings.ReplaceAll(gv, "/", ".") + "." + kind + "." + change)
		e.SetTime(time.Now())
		e.SetExtension("partitionkey", string(m.GetUID()))
		if err := e.SetData(cloudevents.ApplicationJSON, obj); err != nil {
			log.Printf("data: %v", err)
			return
		}
		out.send(ctx, e, string(m.GetUID()), strings.ReplaceAll(*topic, "{resource}", resource))
	}

	factory := informers.NewSharedInformerFactoryWithOptions(clientset, 0, informers.WithNamespace(*namespace))
	var synced []cache.InformerSynced
	for _, resource := range strings.Split(*resources, ",") {
		var informer cache.SharedIndexInformer
		gv := "v1"
		switch resource {
		case "pods":
			informer = factory.Core().V1().Pods().Informer()
		case "nodes":
			informer = factory.Core().V1().Nodes().Informer()
		case "events":
			informer = factory.Core().V1().Events().Informer()
		case "deployments":
			informer, gv = factory.Apps().V1().Deployments().Informer(), "apps/v1"
		case "replicasets":
			informer, gv = factory.Apps().V1().ReplicaSets().Informer(), "apps/v1"
		default:
			log.Fatalf("unknown resource %q (pods, nodes, deployments, replicasets, events)", resource)
		}
		_, err = informer.AddEventHandler(handlers(resource, gv, emit))
		if err != nil {
			log.Fatalf("handler: %v", err)
		}
		synced = append(synced, informer.HasSynced)
	}
	stop := make(chan struct{})
	factory.Start(stop)
	if !cache.WaitForCacheSync(stop, synced...) {
		log.Fatal("the informers never synced")
	}
	fmt.Println("synced")

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	<-signals
	close(stop)
	out.close()
}

// handlers emits an object's adds, its changes of resourceVersion and its deletes.
func handlers(resource, gv string, emit func(resource, gv, change string, obj runtime.Object)) cache.ResourceEventHandlerFuncs {
	version := func(obj any) string {
		m, err := meta.Accessor(obj)
		if err != nil {
			return ""
		}
		return m.GetResourceVersion()
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { emit(resource, gv, "added", obj.(runtime.Object)) },
		UpdateFunc: func(old, new any) {
			if version(old) != version(new) {
				emit(resource, gv, "modified", new.(runtime.Object))
			}
		},
		DeleteFunc: func(obj any) {
			if gone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = gone.Obj
			}
			if o, ok := obj.(runtime.Object); ok {
				emit(resource, gv, "deleted", o)
			}
		},
	}
}
