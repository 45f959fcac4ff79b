// Command baseline is kubecast's comparison point in the end-to-end benchmarks (bench/run):
// a Pod bridge written the way most tools are written today. A client-go SharedInformer on
// Pods calls handlers that build a CloudEvent with the CloudEvents Go SDK (a random id, the
// Pod without managedFields marshalled as data) and produce it to Kafka, either with
// franz-go (asynchronous, binary mode: ce_ headers) or with the SDK's own sarama sender.
//
// usage: baseline -kubeconfig F -namespace NS -brokers B -topic T [-sender franz|sarama]
//
// It prints "synced" once the informer's cache holds the initial list, and on SIGTERM
// flushes what it has produced and exits.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/cloudevents/sdk-go/protocol/kafka_sarama/v2"
	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

type sender interface {
	send(ctx context.Context, e cloudevents.Event, key string)
	close()
}

// franzSender produces asynchronously; the record's headers are the event's attributes
// (CloudEvents Kafka binding, binary mode).
type franzSender struct {
	client *kgo.Client
	topic  string
}

func (s *franzSender) send(ctx context.Context, e cloudevents.Event, key string) {
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
	record := &kgo.Record{Topic: s.topic, Key: []byte(key), Value: e.Data(), Headers: headers}
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

func (s *saramaSender) send(ctx context.Context, e cloudevents.Event, key string) {
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
		return &franzSender{client: client, topic: topic}, nil
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
	emit := func(kind string, pod *corev1.Pod) {
		pod = pod.DeepCopy() // the informer's cache must not be changed
		pod.ManagedFields = nil
		e := cloudevents.NewEvent()
		e.SetID(uuid.NewString())
		e.SetSource(fmt.Sprintf("k8s://%s/api/v1/namespaces/%s/pods", *cluster, pod.Namespace))
		e.SetType("io.k8s.core.v1.pod." + kind)
		e.SetSubject(pod.Namespace + "/" + pod.Name)
		e.SetTime(time.Now())
		e.SetExtension("partitionkey", string(pod.UID))
		if err := e.SetData(cloudevents.ApplicationJSON, pod); err != nil {
			log.Printf("data: %v", err)
			return
		}
		out.send(ctx, e, string(pod.UID))
	}

	factory := informers.NewSharedInformerFactoryWithOptions(clientset, 0, informers.WithNamespace(*namespace))
	informer := factory.Core().V1().Pods().Informer()
	_, err = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { emit("added", obj.(*corev1.Pod)) },
		UpdateFunc: func(old, new any) {
			if old.(*corev1.Pod).ResourceVersion != new.(*corev1.Pod).ResourceVersion {
				emit("modified", new.(*corev1.Pod))
			}
		},
		DeleteFunc: func(obj any) {
			if gone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = gone.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				emit("deleted", pod)
			}
		},
	})
	if err != nil {
		log.Fatalf("handler: %v", err)
	}
	stop := make(chan struct{})
	factory.Start(stop)
	if !cache.WaitForCacheSync(stop, informer.HasSynced) {
		log.Fatal("the informer never synced")
	}
	fmt.Println("synced")

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	<-signals
	close(stop)
	out.close()
}
