#!/usr/bin/env python3
"""Generates crds/tpujob.dev_tpujobs.yaml from its hand-written input and the Kubernetes OpenAPI.

The input, scripts/crd/tpujob.dev_tpujobs.in.yaml, is the whole CustomResourceDefinition except
the schema of the embedded pod templates. Where a marker line

    # gen-crd: properties of io.k8s.api.core.v1.PodTemplateSpec

stands, the output holds the `properties:` of that type, taken from the OpenAPI v3 document of the
Kubernetes version the project pins (k8s.io/kubernetes in e2e/tools/go.mod, whose module ships
api/openapi-spec/v3/api__v1_openapi.json) and turned into a structural schema that the API server
accepts in a CRD:

  * every $ref (and its allOf wrapper) is inlined; the field's own description wins;
  * IntOrString becomes x-kubernetes-int-or-string, Quantity too, with the quantity pattern;
  * ObjectMeta (the template's metadata, a volume claim template's metadata) keeps only labels
    and annotations, the fields the pods get; anything else in it is an unknown field;
  * defaults that are the zero value are dropped (the Pod API fills them in anyway) unless the
    field is a key of an x-kubernetes-list-type=map list that is not required (a CRD needs a
    default there); the declared non-zero defaults (e.g. ports[].protocol: TCP) are kept;
  * x-kubernetes-list-type, -list-map-keys and -map-type are kept; strategic-merge-patch and union
    extensions, which CRD schemas do not have, are dropped. Anything else unknown is an error,
    so a new keyword in a newer OpenAPI document is noticed instead of passed through.

Descriptions deeper than the PodSpec's own fields are dropped (see DESCRIPTION_DEPTH and
docs/api.md): with all of them the CRD is too large for `kubectl apply` (client-side apply copies
the object into an annotation limited to 256 KiB). Field names and types stay everywhere, so
`kubectl explain` lists them; `kubectl explain pod.spec...` has the upstream text.

The TPU type names of spec.tpu.type come from src/policy/tpu_types.inc, the table the operator
itself is built from (policy/tpu_types.cpp). Where the input has

    # gen-crd: tpu type property          the property spec.tpu.type, its description listing
                                          every valid name
    # gen-crd: tpu type rules             the CEL rules on spec: an unknown name is refused with
                                          the names of its generation (one rule per generation),
                                          an unknown generation with the generations, and fields
                                          given beside the type must agree with it

the output holds what the table says, so the API server and the operator accept the same names.
These regions need no OpenAPI document: --check regenerates them offline too.

Each generated region is framed by `# gen-crd: begin ...` and `# gen-crd: end` comments carrying
the Kubernetes version and a digest of the region, so `--check` also works without the OpenAPI
document (no Go, no module cache): the output minus its regions must equal the input, every
region must match its digest, and the version must be the pinned one.

Usage:
  scripts/gen-crd.py            write crds/tpujob.dev_tpujobs.yaml
  scripts/gen-crd.py --check    exit 1 if the committed file differs from what would be written
  scripts/gen-crd.py --sizes    print the sizes that matter for applying the CRD
  scripts/gen-crd.py --check --self-test   also show that the check catches edits
Options: --openapi FILE (instead of locating it through Go), --offline (with --check: do not
look for the OpenAPI document). Environment: GO (the go binary).
"""

import argparse
import difflib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INPUT = os.path.join(ROOT, "scripts", "crd", "tpujob.dev_tpujobs.in.yaml")
OUTPUT = os.path.join(ROOT, "crds", "tpujob.dev_tpujobs.yaml")
TOOLS_MODULE = os.path.join(ROOT, "e2e", "tools")
OPENAPI_IN_MODULE = os.path.join("api", "openapi-spec", "v3", "api__v1_openapi.json")
REGENERATE = "make crd (or: python3 scripts/gen-crd.py)"

# Client-side `kubectl apply` stores the object in this annotation; all annotations of an object
# together may hold at most 256 KiB (TotalAnnotationSizeLimitB).
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
ANNOTATIONS_LIMIT = 256 * 1024
# Room left for the annotations a cluster or a user adds besides the last-applied one.
ANNOTATIONS_MARGIN = 16 * 1024

# Descriptions are kept down to this depth below the pod template: metadata and spec (1), the
# fields of the PodSpec (2). Deeper fields keep their names and types only: with every
# description, the CRD (two pod templates) is about 620 KB as JSON, with none 143 KB, at this
# depth 178 KB, which leaves room in the 256 KiB that client-side `kubectl apply` may use.
DESCRIPTION_DEPTH = 2

TPU_TYPES = os.path.join(ROOT, "src", "policy", "tpu_types.inc")
MARKER = re.compile(r"^(?P<indent> *)# gen-crd: properties of (?P<type>[\w.]+)\n$")
TPU_MARKER = re.compile(r"^(?P<indent> *)# gen-crd: (?P<what>tpu type (?:property|rules))\n$")
TPU_BEGIN = re.compile(
    r"^(?P<indent> *)# gen-crd: begin (?P<what>tpu type (?:property|rules)) from "
    r"src/policy/tpu_types\.inc sha256:(?P<digest>[0-9a-f]{16})"
    r" \(generated: edit the input and run make crd\)\n$")
BEGIN = re.compile(
    r"^(?P<indent> *)# gen-crd: begin properties of (?P<type>[\w.]+) from "
    r"k8s\.io/kubernetes (?P<version>\S+) sha256:(?P<digest>[0-9a-f]{16})"
    r" \(generated: edit the input and run make crd\)\n$")
END = "# gen-crd: end\n"
HEADER = ("# Generated by scripts/gen-crd.py (make crd) from scripts/crd/tpujob.dev_tpujobs.in.yaml\n"
          "# and the OpenAPI of the pinned Kubernetes version. Do not edit: edit the input.\n#\n")

INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
# The grammar of resource.Quantity (signed decimal, then a binary or decimal SI suffix or an
# exponent), as the API server's own OpenAPI-to-CRD tooling writes it.
QUANTITY_PATTERN = (r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
                    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")
EMBEDDED_META_DESCRIPTION = (
    "Labels and annotations for the objects created from this template. Other metadata fields "
    "are set by the operator or the API server and are refused here.")

# Keywords copied as they are; everything else is handled explicitly or is an error.
COPIED = {"type", "format", "required", "enum", "pattern", "minimum", "maximum", "minItems",
          "maxItems", "minLength", "maxLength", "minProperties", "maxProperties",
          "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "uniqueItems", "nullable",
          "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type"}
DROPPED = {"x-kubernetes-patch-strategy", "x-kubernetes-patch-merge-key", "x-kubernetes-unions"}
# Order of the keywords in the output: the hand-written file's habit (type, then description),
# then the rest; properties last so a field's own keywords are read before its children.
ORDER = ["type", "format", "description", "default", "nullable", "pattern", "anyOf",
         "x-kubernetes-int-or-string", "enum", "minimum", "exclusiveMinimum", "maximum",
         "exclusiveMaximum", "multipleOf", "minItems", "maxItems", "uniqueItems", "minLength",
         "maxLength", "minProperties", "maxProperties", "required", "x-kubernetes-list-type",
         "x-kubernetes-list-map-keys", "x-kubernetes-map-type", "items", "additionalProperties",
         "properties"]


class GenError(Exception):
    pass


# ------------------------------------------------------------------------------------------------
# Locating the OpenAPI document of the pinned Kubernetes version


def pinned_version():
    with open(os.path.join(TOOLS_MODULE, "go.mod")) as f:
        for line in f:
            m = re.match(r"^\s*(?:require\s+)?k8s\.io/kubernetes\s+(v\S+)", line)
            if m:
                return m.group(1)
    raise GenError("e2e/tools/go.mod does not require k8s.io/kubernetes")


def find_go():
    for candidate in (os.environ.get("GO"), shutil.which("go"), "/usr/local/go/bin/go"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def locate_openapi(download):
    """Finds the OpenAPI document in the module cache; with download, fetches the module first."""
    go = find_go()
    if go is None:
        raise GenError("Go is needed to locate the Kubernetes OpenAPI document (set GO=/path/to/go "
                       "or pass --openapi FILE)")
    env = dict(os.environ)
    if not download:
        env["GOPROXY"] = "off"
    r = subprocess.run([go, "mod", "download", "-json", "k8s.io/kubernetes"], cwd=TOOLS_MODULE,
                       capture_output=True, text=True, env=env)
    try:
        info = json.loads(r.stdout)
    except json.JSONDecodeError:
        info = {}
    if r.returncode != 0 or "Dir" not in info:
        raise GenError("go mod download k8s.io/kubernetes failed in e2e/tools:\n" +
                       (info.get("Error") or r.stderr or r.stdout).strip())
    path = os.path.join(info["Dir"], OPENAPI_IN_MODULE)
    if not os.path.isfile(path):
        raise GenError(path + " is missing")
    return path, info.get("Version", pinned_version())


# ------------------------------------------------------------------------------------------------
# OpenAPI v3 -> structural CRD schema


def is_zero(value):
    return value in ("", 0, False, {}, []) and not isinstance(value, float)


class Converter:
    def __init__(self, schemas):
        self.schemas = schemas
        self.stack = []

    def ref_name(self, ref):
        prefix = "#/components/schemas/"
        if not ref.startswith(prefix):
            raise GenError("unsupported $ref " + ref)
        name = ref[len(prefix):]
        if name not in self.schemas:
            raise GenError("$ref to a missing schema " + name)
        return name

    def convert(self, node, path):
        """Converts one property schema (possibly a $ref or an allOf wrapper around one)."""
        node = dict(node)
        ref = node.pop("$ref", None)
        all_of = node.pop("allOf", None)
        if all_of is not None:
            if ref is not None or len(all_of) != 1 or set(all_of[0]) != {"$ref"}:
                raise GenError(path + ": allOf other than a wrapper around one $ref")
            ref = all_of[0]["$ref"]
        if ref is None:
            return self.convert_inline(node, path)
        name = self.ref_name(ref)
        unexpected = set(node) - {"description", "default"}
        if unexpected:
            raise GenError(path + ": keywords beside $ref: " + ", ".join(sorted(unexpected)))
        out = self.convert_named(name, path)
        if "description" in node and name != OBJECT_META:
            out["description"] = node["description"]
        if "default" in node:
            out["default"] = node["default"]
        return out

    def convert_named(self, name, path):
        if name == INT_OR_STRING:
            return {"anyOf": [{"type": "integer"}, {"type": "string"}],
                    "x-kubernetes-int-or-string": True}
        if name == QUANTITY:
            return {"anyOf": [{"type": "integer"}, {"type": "string"}],
                    "pattern": QUANTITY_PATTERN, "x-kubernetes-int-or-string": True}
        if name == OBJECT_META:
            meta = self.schemas[name]["properties"]
            return {"type": "object", "description": EMBEDDED_META_DESCRIPTION,
                    "properties": {k: self.convert(meta[k], path + "." + k)
                                   for k in ("annotations", "labels")}}
        if name in self.stack:
            raise GenError(path + ": recursive type " + " -> ".join(self.stack + [name]))
        self.stack.append(name)
        try:
            return self.convert_inline(dict(self.schemas[name]), path)
        finally:
            self.stack.pop()

    def convert_inline(self, node, path):
        out = {}
        for key, value in node.items():
            if key in COPIED:
                if key == "format" and value == "int-or-string":
                    continue
                out[key] = value
            elif key in DROPPED:
                continue
            elif key == "description":
                out[key] = value
            elif key == "default":
                out[key] = value
            elif key == "properties":
                out[key] = {k: self.convert(v, path + "." + k) for k, v in value.items()}
            elif key == "items":
                out[key] = self.convert(value, path + "[]")
            elif key == "additionalProperties":
                if not isinstance(value, dict):
                    raise GenError(path + ": additionalProperties: " + json.dumps(value))
                out[key] = self.convert(value, path + ".<key>")
            else:
                raise GenError("%s: keyword %s is not handled (value %s)" %
                               (path, key, json.dumps(value)[:200]))
        if "type" not in out and "x-kubernetes-int-or-string" not in out:
            raise GenError(path + ": no type")
        return out


def finish(schema, depth, map_keys=()):
    """Applies the CRD rules that depend on the parent: defaults of list-map keys, descriptions.

    depth: how many property names lie between the type's root and schema. map_keys: when
    schema is the item of an x-kubernetes-list-type=map list, the list's keys. A node's own zero
    default is dropped by its parent, which knows whether it is such a key.
    """
    out = {}
    for key, value in schema.items():
        if key == "description" and depth > DESCRIPTION_DEPTH:
            continue
        if key == "properties":
            out[key] = {}
            for name, child in value.items():
                child = finish(child, depth + 1)
                if name in map_keys and name not in schema.get("required", []):
                    if "default" not in child:
                        raise GenError("the list-map key %s is neither required nor defaulted"
                                       % name)
                elif "default" in child and is_zero(child["default"]):
                    del child["default"]
                out[key][name] = child
        elif key in ("items", "additionalProperties"):
            keys = schema.get("x-kubernetes-list-map-keys", ()) if key == "items" else ()
            child = finish(value, depth, keys)
            if "default" in child and is_zero(child["default"]):
                del child["default"]
            out[key] = child
        else:
            out[key] = value
    return out


def build_schema(openapi_path, type_name):
    with open(openapi_path) as f:
        doc = json.load(f)
    schemas = doc["components"]["schemas"]
    if type_name not in schemas:
        raise GenError(type_name + " is not in " + openapi_path)
    converted = Converter(schemas).convert({"$ref": "#/components/schemas/" + type_name},
                                           type_name)
    return finish(converted, 0)["properties"]


# ------------------------------------------------------------------------------------------------
# A small YAML writer: stable output whatever YAML library is installed (or none)

PLAIN = re.compile(r"^[A-Za-z_/][A-Za-z0-9_./-]*$")
PLAIN_TEXT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ,.()/'_=+*;-]*[A-Za-z0-9.)]$")
RESERVED = {"y", "yes", "n", "no", "true", "false", "on", "off", "null"}


def scalar(value, text=False):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        pattern = PLAIN_TEXT if text else PLAIN
        if pattern.match(value) and value.lower() not in RESERVED and "  " not in value:
            return value
        return json.dumps(value, ensure_ascii=False)
    raise GenError("cannot write %r" % (value,))


def literal_ok(text):
    lines = text.split("\n")
    return (len(lines) > 1 and not text.startswith(" ") and not text.endswith("\n") and
            all(line == line.rstrip() and line.isprintable() for line in lines))


def is_flow(value):
    if isinstance(value, list):
        return all(not isinstance(v, (list, dict)) or (isinstance(v, dict) and is_flow(v))
                   for v in value)
    if isinstance(value, dict):
        return len(value) <= 2 and all(not isinstance(v, (list, dict)) for v in value.values())
    return True


def flow(value):
    if isinstance(value, list):
        return "[" + ", ".join(flow(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(k + ": " + flow(v) for k, v in value.items()) + "}"
    return scalar(value)


def ordered(schema):
    unknown = set(schema) - set(ORDER)
    if unknown:
        raise GenError("no output order for " + ", ".join(sorted(unknown)))
    return [k for k in ORDER if k in schema]


def write_schema(schema, indent, out):
    pad = " " * indent
    for key in ordered(schema):
        value = schema[key]
        if key == "properties":
            out.append(pad + "properties:\n")
            for name in sorted(value):
                out.append(pad + "  " + scalar(name) + ":\n")
                write_schema(value[name], indent + 4, out)
        elif key in ("items", "additionalProperties"):
            out.append(pad + key + ":\n")
            write_schema(value, indent + 2, out)
        elif key == "description":
            if literal_ok(value):
                out.append(pad + "description: |-\n")
                out.extend((pad + "  " + line).rstrip() + "\n" for line in value.split("\n"))
            else:
                out.append(pad + "description: " + scalar(value, text=True) + "\n")
        elif isinstance(value, (list, dict)):
            if not is_flow(value):
                raise GenError("cannot write %s: %s" % (key, json.dumps(value)[:200]))
            out.append(pad + key + ": " + flow(value) + "\n")
        else:
            out.append(pad + key + ": " + scalar(value) + "\n")


def region(indent, type_name, version, properties):
    body = []
    write_schema({"properties": properties}, len(indent), body)
    text = "".join(body)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    begin = ("%s# gen-crd: begin properties of %s from k8s.io/kubernetes %s sha256:%s"
             " (generated: edit the input and run make crd)\n" % (indent, type_name, version,
                                                                   digest))
    return begin + text + indent + END


# ------------------------------------------------------------------------------------------------
# spec.tpu.type from src/policy/tpu_types.inc

TPU_GENERATION_ROW = re.compile(r'^TPU_GENERATION\("([a-z0-9]+)", "([a-z0-9-]+)", ([0-9]+)\)$')
TPU_SLICE_ROW = re.compile(r'^TPU_SLICE\("([a-z0-9]+)", "([0-9x]+)", ([0-9]+), "([a-z0-9-]+)"\)$')
# The generation as people call it, where type names spell it otherwise.
TPU_ALIASES = {"v5litepod": "v5e"}


def read_tpu_types(path=TPU_TYPES):
    """The table: [(prefix, accelerator, [(count suffix, topology, chips per host, hosts)])]."""
    generations, cores = [], {}
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line.startswith("TPU_"):
                continue
            g, sl = TPU_GENERATION_ROW.match(line), TPU_SLICE_ROW.match(line)
            if g:
                generations.append((g.group(1), g.group(2), []))
                cores[g.group(1)] = int(g.group(3))
            elif sl and generations and generations[-1][0] == sl.group(1):
                topology, per_host = sl.group(2), int(sl.group(3))
                chips = 1
                for dim in topology.split("x"):
                    chips *= int(dim)
                generations[-1][2].append((str(chips * cores[sl.group(1)]), topology, per_host,
                                           chips // per_host))
            else:
                raise GenError("%s:%d: not a row this script reads (one TPU_GENERATION or "
                               "TPU_SLICE per line, after its generation): %s" %
                               (os.path.relpath(path, ROOT), number, line))
    if not generations:
        raise GenError(os.path.relpath(path, ROOT) + " has no rows")
    return generations


def tpu_generation_label(prefix):
    return prefix + (" (%s)" % TPU_ALIASES[prefix] if prefix in TPU_ALIASES else "")


def tpu_names_text(prefix, slices, cores_word):
    """The valid names of one generation, worded as DescribeTpuTypeNames() words them."""
    return "%s (%s), or %s-<topology> for topology %s" % (
        ", ".join(prefix + "-" + s[0] for s in slices), cores_word, prefix,
        ", ".join(s[1] for s in slices))


def tpu_cores_word(prefix):
    with open(TPU_TYPES) as f:
        m = re.search(r'^TPU_GENERATION\("%s", "[^"]+", ([0-9]+)\)$' % re.escape(prefix), f.read(),
                      re.M)
    return "chips" if m and m.group(1) == "1" else "TensorCores"


def tpu_property(indent, generations):
    lines = [
        "type is the TPU type as XPK and the GKE documentation name it: <generation>-<N>, where N "
        "counts TensorCores for v4, v5p and tpu7x (two per chip) and chips for v5litepod (v5e) "
        "and v6e, or <generation>-<topology>. It sets tpu.accelerator, tpu.topology, "
        "tpu.chipsPerWorker (chips per host) and replicaSpecs.Worker.replicas (hosts per "
        "slice), which may then be left out; where they are given they must agree with it. "
        "status.tpu shows what the operator derived. Valid names by generation:"]
    for prefix, _, slices in generations:
        lines.append(tpu_generation_label(prefix) + ": " +
                     tpu_names_text(prefix, slices, tpu_cores_word(prefix)) + ".")
    pad = indent + "  "
    out = [indent + "type:\n", pad + "type: string\n", pad + "maxLength: 32\n",
           pad + "description: |-\n"]
    out.extend(pad + "  " + line + "\n" for line in lines)
    return "".join(out)


def cel_string(text):
    if "'" in text or "\\" in text:
        raise GenError("cannot quote %r for CEL" % text)
    return "'" + text + "'"


def tpu_rules(indent, generations):
    """CEL rules on spec (self is the spec): names, generations and agreement with the type."""
    out = []

    def rule(expression, message=None, message_expression=None):
        out.append(indent + "- rule: " + json.dumps(expression) + "\n")
        if message is not None:
            out.append(indent + "  message: " + json.dumps(message) + "\n")
        if message_expression is not None:
            out.append(indent + "  messageExpression: " + json.dumps(message_expression) + "\n")
        out.append(indent + "  fieldPath: .tpu.type\n")
        out.append(indent + "  reason: FieldValueInvalid\n")

    known = ", ".join(tpu_generation_label(g[0]) for g in generations)
    rule("!has(self.tpu.type) || [%s].exists(p, self.tpu.type.startsWith(p))" %
         ", ".join(cel_string(g[0] + "-") for g in generations),
         message="tpu.type: the generation must be one of %s, as in v5p-128 or v6e-2x4" % known)
    for prefix, accelerator, slices in generations:
        # suffix -> "topology,chips per host,hosts per slice", for both names of each shape.
        entries = []
        for count, topology, per_host, hosts in slices:
            value = cel_string("%s,%d,%d" % (topology, per_host, hosts))
            entries.append(cel_string(count) + ": " + value)
            entries.append(cel_string(topology) + ": " + value)
        lookup = "[{%s}[?self.tpu.type.substring(%d)].orValue('')]" % (", ".join(entries),
                                                                        len(prefix) + 1)
        applies = "!has(self.tpu.type) || !self.tpu.type.startsWith(%s)" % cel_string(prefix + "-")
        agrees = (
            "v != '' && "
            "(!has(self.tpu.accelerator) || self.tpu.accelerator == %s) && "
            "(!has(self.tpu.topology) || self.tpu.topology == v.split(',')[0]) && "
            "(!has(self.tpu.chipsPerWorker) || string(self.tpu.chipsPerWorker) == "
            "v.split(',')[1]) && "
            "(!has(self.replicaSpecs.Worker.replicas) || "
            "string(self.replicaSpecs.Worker.replicas) == v.split(',')[2]) && "
            "(!has(self.tpu.slices) || self.tpu.slices * int(v.split(',')[2]) <= 16384)" %
            cel_string(accelerator))
        unknown = "'tpu.type: ' + self.tpu.type + %s" % cel_string(
            " is not a %s TPU type; %s types are: %s" % (
                prefix, prefix, tpu_names_text(prefix, slices, tpu_cores_word(prefix))))
        implies = ("'tpu.type: ' + self.tpu.type + ' means accelerator %s, topology ' + "
                   "v.split(',')[0] + ', chipsPerWorker ' + v.split(',')[1] + ' and "
                   "replicaSpecs.Worker.replicas ' + v.split(',')[2] + ' (hosts per slice); "
                   "leave those fields out or give these values'" % accelerator)
        too_many = ("'tpu.type: ' + self.tpu.type + ' has ' + v.split(',')[2] + ' hosts per "
                    "slice: tpu.slices * hosts per slice, the worker pods of the job, must be at most "
                    "16384'")
        many = "has(self.tpu.slices) && self.tpu.slices * int(v.split(',')[2]) > 16384"
        rule("%s || %s.all(v, %s)" % (applies, lookup, agrees),
             message_expression="%s.map(v, v == '' ? %s : (%s ? %s : %s))[0]" % (
                 lookup, unknown, many, too_many, implies))
    return "".join(out)


def tpu_region(indent, what, generations):
    body = tpu_property(indent, generations) if what == "tpu type property" else \
        tpu_rules(indent, generations)
    digest = hashlib.sha256(body.encode()).hexdigest()[:16]
    return ("%s# gen-crd: begin %s from src/policy/tpu_types.inc sha256:%s (generated: edit the "
            "input and run make crd)\n" % (indent, what, digest)) + body + indent + END


# ------------------------------------------------------------------------------------------------
# Input -> output, output -> input


def generate(input_text, schema_for, version):
    out = [HEADER]
    generations = read_tpu_types()
    for line in input_text.splitlines(keepends=True):
        m = MARKER.match(line)
        t = TPU_MARKER.match(line)
        if t:
            out.append(tpu_region(t.group("indent"), t.group("what"), generations))
        elif m:
            out.append(region(m.group("indent"), m.group("type"), version,
                              schema_for(m.group("type"))))
        else:
            if "# gen-crd:" in line:
                raise GenError("malformed marker in the input: " + line.strip())
            out.append(line)
    if not any(MARKER.match(l) for l in input_text.splitlines(keepends=True)):
        raise GenError("the input has no `# gen-crd: properties of <type>` marker")
    return "".join(out)


def degenerate(output_text):
    """Undoes generate() without the OpenAPI: returns (input text, versions, problems)."""
    result, versions, problems = [], set(), []
    if not output_text.startswith(HEADER):
        problems.append("the generated file does not start with the generator's header")
    lines = output_text[len(HEADER):].splitlines(keepends=True) if not problems else \
        output_text.splitlines(keepends=True)
    i = 0
    generations = None
    while i < len(lines):
        m = BEGIN.match(lines[i]) or TPU_BEGIN.match(lines[i])
        if not m:
            result.append(lines[i])
            i += 1
            continue
        indent = m.group("indent")
        j = i + 1
        while j < len(lines) and lines[j] != indent + END:
            j += 1
        if j == len(lines):
            problems.append("line %d: a generated region without its end line" % (i + 1))
            return None, versions, problems
        body = "".join(lines[i + 1:j])
        if hashlib.sha256(body.encode()).hexdigest()[:16] != m.group("digest"):
            problems.append("lines %d-%d: the generated region was edited by hand" % (i + 1, j + 1))
        if "what" in m.groupdict():
            # Made from the TPU type table alone: compare with what the table makes now.
            generations = generations or read_tpu_types()
            if tpu_region(indent, m.group("what"), generations) != "".join(lines[i:j + 1]):
                problems.append("lines %d-%d: the %s region does not match "
                                "src/policy/tpu_types.inc" % (i + 1, j + 1, m.group("what")))
            result.append("%s# gen-crd: %s\n" % (indent, m.group("what")))
        else:
            versions.add(m.group("version"))
            result.append("%s# gen-crd: properties of %s\n" % (indent, m.group("type")))
        i = j + 1
    return "".join(result), versions, problems


def offline_problems(committed, input_text, pinned):
    """What --check finds without the OpenAPI document; empty when committed is consistent."""
    rel_out, rel_in = os.path.relpath(OUTPUT, ROOT), os.path.relpath(INPUT, ROOT)
    recovered, versions, problems = degenerate(committed)
    if recovered is not None and recovered != input_text:
        problems.append(rel_out + " outside the generated regions differs from " + rel_in +
                        ":\n" + "".join(difflib.unified_diff(
                            input_text.splitlines(True), recovered.splitlines(True), rel_in,
                            rel_out, n=1)))
    if versions - {pinned}:
        problems.append("generated from k8s.io/kubernetes %s, but e2e/tools/go.mod pins %s" %
                        (", ".join(sorted(versions)), pinned))
    if not versions:
        problems.append("no generated region in " + rel_out)
    return problems


def self_test(committed, input_text, pinned, generated):
    """The checks can fail: each kind of drift, made on a copy in memory, is reported."""
    region_at = committed.index("\n", committed.index("# gen-crd: begin")) + 1
    field = committed.index("type: string", region_at)
    edits = {
        "a hand edit inside a generated region":
            committed[:field] + "type: integer" + committed[field + len("type: string"):],
        "a hand edit outside the generated regions":
            committed.replace("kind: CustomResourceDefinition\n", "kind: CRD\n", 1),
        "another Kubernetes version": committed.replace(" " + pinned + " sha256:", " v0.0.0 sha256:"),
        "a removed header": committed[len(HEADER):],
    }
    failures = []
    for what, edited in edits.items():
        if edited == committed:
            failures.append("self-test: could not make " + what)
        elif not offline_problems(edited, input_text, pinned):
            failures.append("self-test: the offline check misses " + what)
        elif generated is not None and edited == generated:
            failures.append("self-test: the full check misses " + what)
    tpu_at = committed.find("# gen-crd: begin tpu type rules")
    if tpu_at >= 0:
        # The table changed (a row more) but the CRD was not regenerated.
        stale = committed[:tpu_at] + committed[tpu_at:].replace("'2x2x1,4,1'", "'2x2x1,4,2'", 1)
        edits_tpu = {"a TPU type rule out of step with src/policy/tpu_types.inc": stale}
        for what, edited in edits_tpu.items():
            if edited == committed:
                failures.append("self-test: could not make " + what)
            elif not offline_problems(edited, input_text, pinned):
                failures.append("self-test: the offline check misses " + what)
    edited_input = input_text.replace("kind: CustomResourceDefinition\n", "kind: CRD\n", 1)
    if not offline_problems(committed, edited_input, pinned):
        failures.append("self-test: the offline check misses an edited input")
    if failures:
        raise GenError("\n".join(failures))
    print("gen-crd: self-test: hand edits, an edited input, a stale TPU type table and another "
          "version are all caught")


# ------------------------------------------------------------------------------------------------
# Sizes


def go_json_size(obj):
    """Bytes of Go's json.Marshal of obj (compact, sorted keys, <>& and U+2028/9 escaped)."""
    text = json.dumps(obj, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    extra = sum(text.count(c) for c in "<>&\u2028\u2029") * 5
    return len(text.encode()) + extra


def sizes(output_text):
    import yaml  # only for measuring; generation itself needs no YAML library
    crd = yaml.safe_load(output_text)
    annotations = dict(crd["metadata"].get("annotations") or {})
    annotation = go_json_size(crd) + len(LAST_APPLIED)
    annotation += sum(len(k) + len(v) for k, v in annotations.items())
    return {"file": len(output_text.encode()), "json": go_json_size(crd),
            "annotations": annotation, "crd": crd}


def check_sizes(info):
    limit = ANNOTATIONS_LIMIT - ANNOTATIONS_MARGIN
    if info["annotations"] > limit:
        raise GenError("the CRD would need %d bytes of annotations under client-side kubectl "
                       "apply; the limit is %d (%d with a margin for other annotations)" %
                       (info["annotations"], ANNOTATIONS_LIMIT, limit))


def verify_round_trip(output_text, schema_for):
    """The written YAML reads back as the schema that was meant (guards the YAML writer)."""
    try:
        import yaml
    except ImportError:
        return
    crd = yaml.safe_load(output_text)

    def walk(node):
        if isinstance(node, dict):
            if "template" in node and isinstance(node["template"], dict) and \
                    "properties" in node["template"]:
                yield node["template"]["properties"]
            for v in node.values():
                yield from walk(v)
        elif isinstance(node, list):
            for v in node:
                yield from walk(v)

    expected = schema_for("io.k8s.api.core.v1.PodTemplateSpec")
    found = list(walk(crd))
    if not found:
        raise GenError("no pod template schema found in the output")
    for got in found:
        if got != expected:
            raise GenError("the YAML writer's output does not read back as the schema")


# ------------------------------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="compare the committed CRD with the generator's output")
    parser.add_argument("--offline", action="store_true",
                        help="with --check: check without the OpenAPI document")
    parser.add_argument("--self-test", action="store_true",
                        help="with --check: also show that edits of a copy would be caught")
    parser.add_argument("--sizes", action="store_true", help="print the sizes of the CRD")
    parser.add_argument("--openapi", help="the api__v1_openapi.json to read")
    args = parser.parse_args()

    with open(INPUT) as f:
        input_text = f.read()
    try:
        with open(OUTPUT) as f:
            committed = f.read()
    except FileNotFoundError:
        committed = None
    rel_out, rel_in = os.path.relpath(OUTPUT, ROOT), os.path.relpath(INPUT, ROOT)

    try:
        pinned = pinned_version()
        openapi, version = None, pinned
        if args.openapi:
            openapi = args.openapi
        elif not args.offline:
            try:
                # A check uses the module cache as it is (no network, quick); generating
                # downloads the module when needed.
                openapi, version = locate_openapi(download=not args.check)
            except GenError as e:
                if not args.check:
                    raise
                print("gen-crd: %s\ngen-crd: checking without the OpenAPI document" % e,
                      file=sys.stderr)

        if openapi is None:
            # --check without the OpenAPI document: everything but the regions' content.
            if committed is None:
                raise GenError(rel_out + " is missing")
            problems = offline_problems(committed, input_text, pinned)
            if args.self_test:
                self_test(committed, input_text, pinned, None)
            if problems:
                raise GenError("\n".join(problems) + "\n" + rel_out + " is out of date: run " +
                               REGENERATE)
            print("gen-crd: %s matches %s (the generated regions were not compared with the "
                  "OpenAPI document)" % (rel_out, rel_in))
            return 0

        cache = {}

        def schema_for(type_name):
            if type_name not in cache:
                cache[type_name] = build_schema(openapi, type_name)
            return cache[type_name]

        text = generate(input_text, schema_for, version)
        verify_round_trip(text, schema_for)
        info = None
        try:
            info = sizes(text)
        except ImportError:
            print("gen-crd: PyYAML (python3-yaml) is missing: the sizes and the written YAML "
                  "were not checked", file=sys.stderr)
        if info is not None:
            check_sizes(info)
        if args.sizes and info is not None:
            print("%s: %d bytes of YAML, %d bytes as JSON; client-side apply needs %d bytes of "
                  "annotations (limit %d)" % (rel_out, info["file"], info["json"],
                                              info["annotations"], ANNOTATIONS_LIMIT))
        if args.check:
            if args.self_test and committed is not None:
                self_test(committed, input_text, pinned, text)
            if committed == text:
                print("gen-crd: %s is up to date (%s, k8s.io/kubernetes %s)" %
                      (rel_out, rel_in, version))
                return 0
            diff = "".join(difflib.unified_diff(
                (committed or "").splitlines(True), text.splitlines(True),
                rel_out + " (committed)", rel_out + " (generated)", n=1))
            lines = diff.splitlines(True)
            if len(lines) > 60:
                diff = "".join(lines[:60]) + "... (%d more lines)\n" % (len(lines) - 60)
            raise GenError(diff + rel_out + " is not what the generator writes from " + rel_in +
                           " and k8s.io/kubernetes " + version + ": run " + REGENERATE +
                           " (edit " + rel_in + ", never the generated file)")
        if not args.sizes or committed != text:
            if committed != text:
                with open(OUTPUT, "w") as f:
                    f.write(text)
                print("gen-crd: wrote " + rel_out)
            else:
                print("gen-crd: %s is up to date" % rel_out)
        return 0
    except GenError as e:
        print("gen-crd: " + str(e), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
