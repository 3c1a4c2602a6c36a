package leader

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

func metaOf(c Config) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Name}
}
