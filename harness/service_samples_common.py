"""What the sample servers of service_samples.py share."""

# Every sample server answers in JSON the same way.
SEND_JSON = '''
    def send_json(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
'''
