{{/*
The operator's permissions, derived from the requests it makes (src/controller):
  - informers (manager.cpp) list and watch Pods, Nodes and TPUJobs;
  - the TPUJob reconciler creates and deletes the workers' Pods, creates the headless Service,
    patches TPUJob status (tpujobs/status) and deletes finished TPUJobs whose
    ttlSecondsAfterFinished has passed, and for in-place restart patches the workers' Pods'
    annotations (tpujob.dev/generation, tpujob.dev/barrier); the Pods and the Service carry an
    owner reference
    with blockOwnerDeletion, which the OwnerReferencesPermissionEnforcement admission plugin
    allows only to those who may update tpujobs/finalizers (a permission check only: a
    CustomResource has no finalizers subresource to call);
  - for jobs with spec.faultTolerance.progress.logPattern, the reconciler gets worker 0's log
    tail (pods/log) at most once per job per --progress-refresh-seconds to keep
    status.progress current;
  - the event recorder creates Events and patches them to count repeats;
  - the cordoner and the node reconciler patch Nodes (cordon, taint, annotate, uncordon);
  - the job queue gets PriorityClasses named by spec.priorityClassName;
  - unless operator.kueue is "false", the Kueue adapter (controller/kueue_adapter.cpp) lists
    and watches the Workloads it writes, creates one per job naming a LocalQueue, patches its
    spec.active (suspend) and its status (quota given back after an eviction, PodsReady,
    Finished), deletes one that no longer matches its job (or whose job left Kueue), and
    gets the ResourceFlavors Kueue assigns; the owner reference with blockOwnerDeletion on a
    Workload is covered by tpujobs/finalizers as for Pods;
  - leader election gets, creates and updates its Lease (rbac/leader-election.yaml);
  - with metrics.secure, every scrape of /metrics is checked with a TokenReview and a
    SubjectAccessReview (src/metrics/auth.cpp).
No get on Pods, Nodes or TPUJobs (the caches serve reads), no Secrets, no wildcards.
*/}}

{{/* Namespaced: where TPUJobs live (every namespace, or watchNamespace). */}}
{{- define "tpujob-operator.namespacedRules" -}}
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["pods/log"]
  verbs: ["get"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["create"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
- apiGroups: ["tpujob.dev"]
  resources: ["tpujobs"]
  verbs: ["list", "watch", "delete"]
- apiGroups: ["tpujob.dev"]
  resources: ["tpujobs/status"]
  verbs: ["patch"]
- apiGroups: ["tpujob.dev"]
  resources: ["tpujobs/finalizers"]
  verbs: ["update"]
{{- if ne (toString .Values.operator.kueue) "false" }}
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["list", "watch", "create", "patch", "delete"]
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads/status"]
  verbs: ["patch"]
{{- end }}
{{- end }}

{{/* Cluster-scoped resources, always through a ClusterRole. */}}
{{- define "tpujob-operator.clusterRules" -}}
{{- /* get: a node is read from the API server before a permanent exit on it fails a job. */ -}}
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["scheduling.k8s.io"]
  resources: ["priorityclasses"]
  verbs: ["get"]
{{- if ne (toString .Values.operator.kueue) "false" }}
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["resourceflavors"]
  verbs: ["get"]
{{- end }}
{{- if .Values.metrics.secure }}
- apiGroups: ["authentication.k8s.io"]
  resources: ["tokenreviews"]
  verbs: ["create"]
- apiGroups: ["authorization.k8s.io"]
  resources: ["subjectaccessreviews"]
  verbs: ["create"]
{{- end }}
{{- end }}

{{/* Events about Nodes (cluster-scoped objects) are recorded in namespace "default". */}}
{{- define "tpujob-operator.nodeEventRules" -}}
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}
