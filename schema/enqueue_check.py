"""Checks the enqueue function's requests and answers against
schema/enqueue-request.schema.json and schema/enqueue-response.schema.json.

Input (a file named on the command line): {"valid": [requests], "invalid":
[requests the schema must refuse], "answers": [what the function answered]}.
A Lambda error's errorMessage must itself be an errorDocument. Prints one
summary line; exits 1 on any mismatch. The integration test
TestEnqueueBootstrapUnderRIE writes the input from what it really sent and
received.
"""
import json
import os
import sys

import jsonschema
from referencing import Registry, Resource

HERE = os.path.dirname(os.path.abspath(__file__))


def load(name):
    with open(os.path.join(HERE, name)) as f:
        return json.load(f)


def main(path):
    request = jsonschema.Draft202012Validator(load("enqueue-request.schema.json"))
    response_schema = load("enqueue-response.schema.json")
    response = jsonschema.Draft202012Validator(response_schema)
    document = jsonschema.Draft202012Validator(
        {"$ref": "enqueue-response.schema.json#/$defs/errorDocument"},
        registry=Registry().with_resource("enqueue-response.schema.json", Resource.from_contents(response_schema)))
    with open(path) as f:
        run = json.load(f)
    problems = []
    for i, r in enumerate(run["valid"]):
        for e in request.iter_errors(r):
            problems.append(f"valid request {i}: {e.json_path}: {e.message}")
    for i, r in enumerate(run["invalid"]):
        if request.is_valid(r):
            problems.append(f"invalid request {i} passes the schema: {json.dumps(r)[:300]}")
    errors = 0
    for i, a in enumerate(run["answers"]):
        for e in response.iter_errors(a):
            problems.append(f"answer {i}: {e.json_path}: {e.message}: {json.dumps(a)[:300]}")
        if "errorType" in a:
            errors += 1
            try:
                doc = json.loads(a["errorMessage"])
            except (ValueError, KeyError, TypeError) as e:
                problems.append(f"answer {i}: errorMessage is not JSON: {e}")
                continue
            for e in document.iter_errors(doc):
                problems.append(f"answer {i} errorMessage: {e.json_path}: {e.message}")
    print(f"enqueue-schemas: valid_requests={len(run['valid'])} invalid_requests={len(run['invalid'])} "
          f"answers={len(run['answers'])} errors={errors} problems={len(problems)}")
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
