// Minimal ONNX model builder (single-node graphs) on protobufjs, with the
// subset of onnx.proto the benchmark needs (field numbers from onnx/onnx.proto3).
import protobuf from 'protobufjs';

const ONNX_SUBSET = `
syntax = "proto3";
package onnx;
message AttributeProto {
  enum AttributeType { UNDEFINED = 0; FLOAT = 1; INT = 2; STRING = 3; TENSOR = 4; GRAPH = 5;
                       FLOATS = 6; INTS = 7; STRINGS = 8; }
  string name = 1;
  float f = 2;
  int64 i = 3;
  bytes s = 4;
  repeated float floats = 7;
  repeated int64 ints = 8;
  AttributeType type = 20;
}
message ValueInfoProto { string name = 1; TypeProto type = 2; }
message NodeProto {
  repeated string input = 1;
  repeated string output = 2;
  string name = 3;
  string op_type = 4;
  repeated AttributeProto attribute = 5;
  string domain = 7;
}
message OperatorSetIdProto { string domain = 1; int64 version = 2; }
message ModelProto {
  int64 ir_version = 1;
  string producer_name = 2;
  GraphProto graph = 7;
  repeated OperatorSetIdProto opset_import = 8;
}
message GraphProto {
  repeated NodeProto node = 1;
  string name = 2;
  repeated ValueInfoProto input = 11;
  repeated ValueInfoProto output = 12;
}
message TensorShapeProto {
  message Dimension { oneof value { int64 dim_value = 1; string dim_param = 2; } }
  repeated Dimension dim = 1;
}
message TypeProto {
  message Tensor { int32 elem_type = 1; TensorShapeProto shape = 2; }
  oneof value { Tensor tensor_type = 1; }
}
`;

const root = protobuf.parse(ONNX_SUBSET, { keepCase: true }).root;
const ModelProto = root.lookupType('onnx.ModelProto');
const AttrType = { FLOAT: 1, INT: 2, STRING: 3, FLOATS: 6, INTS: 7 };
export const ElemType = { float32: 1, int32: 6, int64: 7, float16: 10 };

function valueInfo(name, elemType, dims) {
  return {
    name,
    type: { tensor_type: { elem_type: elemType, shape: { dim: dims.map((d) => (typeof d === 'string' ? { dim_param: d } : { dim_value: d })) } } },
  };
}

function attribute(name, value) {
  if (typeof value === 'string') return { name, type: AttrType.STRING, s: Buffer.from(value) };
  if (Number.isInteger(value)) return { name, type: AttrType.INT, i: value };
  if (typeof value === 'number') return { name, type: AttrType.FLOAT, f: value };
  throw new Error(`onnx-model: unsupported attribute ${name}`);
}

/**
 * One-node model. inputs/outputs: [{ name, type: 'float32'|'float16'|'int32', dims }] where
 * an empty name in `nodeInputs` marks a skipped optional input.
 */
export function singleNodeModel({ opType, domain = '', attributes = {}, inputs, outputs, nodeInputs, nodeOutputs, opset = 23, msOpset = 1, irVersion = 10 }) {
  const model = {
    ir_version: irVersion,
    producer_name: 'sdpa-wasm-bench',
    opset_import: [{ domain: '', version: opset }, { domain: 'com.microsoft', version: msOpset }],
    graph: {
      name: `${opType}_bench`,
      node: [{
        name: opType,
        op_type: opType,
        domain,
        input: nodeInputs ?? inputs.map((i) => i.name),
        output: nodeOutputs ?? outputs.map((o) => o.name),
        attribute: Object.entries(attributes).map(([k, v]) => attribute(k, v)),
      }],
      input: inputs.map((i) => valueInfo(i.name, ElemType[i.type], i.dims)),
      output: outputs.map((o) => valueInfo(o.name, ElemType[o.type], o.dims)),
    },
  };
  const err = ModelProto.verify(model);
  if (err) throw new Error(`onnx-model: ${err}`);
  return ModelProto.encode(ModelProto.fromObject(model)).finish();
}
